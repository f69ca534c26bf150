"""Temporal Fusion Transformer (Lim et al. 2021): the model (``model``) and its building
blocks (``layers``: GRN, GLU, variable selection, interpretable attention)."""

from models.tft.model import TemporalFusionTransformer, TFTConfig

__all__ = ["TFTConfig", "TemporalFusionTransformer"]
