"""A fitted LightGBM forecaster as a deployable artifact: the same directory layout as the
torch forecasters' (``models.export``: ``meta.json`` + a model file), the boosters as
LightGBM's own text format inside one JSON file, no pickle. ``load_lightgbm`` gives a
callable ``(static, observed, known) -> [B, H, Q]`` torch tensor, so ``foxhunt predict``,
the pyfunc wrapper and the evaluation call it like any forecaster."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np
import torch

from foxhunt_pipeline.basics.atomic import atomic_replace_dir
from models.lightgbm.model import LightGBMQuantiles

LIGHTGBM_FORMAT = "lightgbm"
BOOSTERS_FILE = "boosters.json"
META_FILE = "meta.json"
INPUT_NAMES = ("static", "observed", "known")


class LightGBMForecaster:
    """The forecaster interface of a ``LightGBMQuantiles``: torch tensors in and out."""

    def __init__(self, model: LightGBMQuantiles) -> None:
        self.model = model

    def __call__(self, static: Any, observed: Any, known: Any) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(self.model(static, observed, known)))

    def eval(self) -> LightGBMForecaster:  # the torch-module calls callers make
        return self

    def to(self, *_: Any, **__: Any) -> LightGBMForecaster:
        return self


def save_lightgbm(model: LightGBMQuantiles, path: str | os.PathLike[str], *,
                  metadata: Mapping[str, Any]) -> Path:
    """Write the artifact directory ``path`` atomically; ``metadata`` as for
    ``models.export.export_artifact`` (names, normalisation, quantiles, ...)."""
    boosters = {
        "quantiles": model.quantiles, "fitted_quantiles": model.fitted_quantiles,
        "lookback": model.lookback, "horizon": model.horizon,
        "feature_names": model.feature_names, "window_mean": model.window_mean,
        "params": {k: v for k, v in model.params.items() if _json_value(v)},
        "boosters": [[b.model_to_string(num_iteration=b.best_iteration or None) for b in row]
                     for row in model.boosters],
    }

    def build(tmp: Path) -> None:
        (tmp / BOOSTERS_FILE).write_text(json.dumps(boosters))
        meta = {**dict(metadata), "format": LIGHTGBM_FORMAT, "model_file": BOOSTERS_FILE,
                "input_names": list(INPUT_NAMES), "lightgbm_version": lgb.__version__,
                "best_iterations": model.best_iterations,
                "created_at": datetime.now(UTC).isoformat()}
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2))

    return atomic_replace_dir(Path(path), build)


def load_boosters(path: str | os.PathLike[str]) -> LightGBMQuantiles:
    """The ``LightGBMQuantiles`` an artifact directory holds."""
    path = Path(path)
    if path.is_file():
        path = path.parent
    raw = json.loads((path / BOOSTERS_FILE).read_text())
    return LightGBMQuantiles(
        boosters=[[lgb.Booster(model_str=s) for s in row] for row in raw["boosters"]],
        quantiles=list(raw["quantiles"]), fitted_quantiles=list(raw["fitted_quantiles"]),
        lookback=int(raw["lookback"]), horizon=int(raw["horizon"]),
        feature_names=list(raw["feature_names"]), window_mean=bool(raw["window_mean"]),
        params=dict(raw.get("params") or {}))


def load_lightgbm(path: str | os.PathLike[str], device: Any = "cpu"
                  ) -> tuple[LightGBMForecaster, dict[str, Any]]:
    """``(forecaster, meta)`` of an artifact directory (``device`` is accepted for the
    loaders' common signature: LightGBM predicts on the CPU)."""
    path = Path(path)
    if path.is_file():
        path = path.parent
    meta = json.loads((path / META_FILE).read_text())
    return LightGBMForecaster(load_boosters(path)), meta


def _json_value(v: Any) -> bool:
    return isinstance(v, str | int | float | bool | type(None) | list | tuple)
