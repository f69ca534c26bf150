"""Registering a trained model in MLflow as a pyfunc model with a model card: the training
assets' last step, shared by the four families (see ``resources.pyfunc_models``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import polars as pl

from foxhunt_pipeline.basics.atomic import atomic_write
from foxhunt_pipeline.serving.actions import SERVING_META_FILE, serving_meta
from foxhunt_pipeline.storage import trade_dates
from models.export import export_artifact, forecaster_metadata
from models.training.checkpoint import load_checkpoint
from resources.pyfunc_models import MODEL_ARTIFACT, data_range_of, model_card, register_pyfunc
from resources.storage import FoxhuntStorage

# TorchScript first: seconds to write and milliseconds to load for the fp32 serving copy
# (torch.export takes 5-10x longer on the TFT); both are checked against the module.
SERVING_FORMATS = ("torchscript", "torch.export")


def features_frame(storage: FoxhuntStorage) -> pl.LazyFrame | None:
    """The features table, lazily (the input example reads a few rows of it); ``None`` when
    it is not there (a dataset built elsewhere) or unreadable: the version is then registered
    without, and the cause logged."""
    try:
        frame = trade_dates.scan_table(storage.warehouse_root, "features")
        if frame is not None:
            frame.collect_schema()
        return frame
    except (OSError, ValueError, pl.exceptions.PolarsError) as e:  # ValueError: pyarrow's
        dg.get_dagster_logger().warning(
            f"features table unreadable ({type(e).__name__}: {e}): registered without an input "
            "example")
        return None


def export_forecaster(family: str, checkpoint: Path, data: Any, out: Path) -> Path:
    """The checkpoint as the project's deployable artifact (what ``foxhunt predict`` loads),
    with the dataset's names, train-only normalisation and target scale in its sidecar."""
    model, _ = load_checkpoint(checkpoint)
    split = "validation" if data.splits.get("validation") is not None and data.splits["validation"].n_windows else "train"
    b = data.window_dataset(split).batch(np.arange(min(2, data.splits[split].n_windows)))
    return export_artifact(model, (b["static"], b["observed"], b["known"]), out,
                           metadata=forecaster_metadata(data.meta, model=family, precision="fp32"),
                           formats=SERVING_FORMATS)


def write_agent_serving_meta(policy_dir: Path, data: Any) -> Path:
    """What an agent needs besides its policy to read the features table (names, stats)."""
    target = Path(policy_dir) / SERVING_META_FILE
    atomic_write(target, lambda p: p.write_text(json.dumps(serving_meta(data.meta), indent=2)))
    return target


def register(run: Any, family: str, registered: str, artifact: Path, data: Any, storage: FoxhuntStorage,
             metrics: Mapping[str, Any], *, precision: str = "fp32", profile: str | None = None,
             artifact_path: str = MODEL_ARTIFACT, tags: Mapping[str, str] | None = None,
             notes: Sequence[str] = ()) -> str:
    """A new version of ``registered``: the pyfunc wrapper around ``artifact`` with signature,
    input example and model card (with ``notes``); returns the version number."""
    card = model_card(family, precision, data.meta, data_range=data_range_of(data), metrics=metrics,
                      notes=notes)
    all_tags = {**({"profile": profile} if profile else {}), **dict(tags or {})}
    return register_pyfunc(run, registered, artifact, family=family, precision=precision,
                           features=features_frame(storage), card=card, tags=all_tags,
                           artifact_path=artifact_path)
