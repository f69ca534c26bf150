"""The training configuration a forecaster checkpoint carries."""

from __future__ import annotations

from pathlib import Path

from models.training.checkpoint import read_checkpoint_meta


def saved_train_config(checkpoint: Path) -> dict | None:
    """The ``TrainConfig`` a forecaster checkpoint carries (single-process training saves it
    since commit c3b1458), or ``None`` for a checkpoint without one (older, or from DDP)."""
    return read_checkpoint_meta(checkpoint).get("train_config")
