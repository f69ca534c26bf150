"""What a checkpoint records about the dataset it was trained on, so a loader can check it
against the dataset it is given (``models.training.checkpoint.check_compatible``)."""

from __future__ import annotations

from models.windows import TrainingData


def dataset_extra(data: TrainingData) -> dict:
    """What a checkpoint records about the dataset it was trained on (names, scale, shape)."""
    return {
        "observed_names": data.observed_names, "known_names": data.known_names,
        "static_names": data.static_names, "feature_hash": data.meta["feature_hash"],
        "target_scale": data.target_scale, "lookback": data.lookback, "horizon": data.horizon,
    }
