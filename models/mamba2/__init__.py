"""Mamba-2 forecaster (Dao & Gu 2024): the model (``model``), the mixer layer (``mixer``)
and the state-space duality scan (``ssd``)."""

from models.mamba2.model import Mamba2Config, Mamba2Forecaster

__all__ = ["Mamba2Config", "Mamba2Forecaster"]
