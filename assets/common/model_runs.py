"""Where a training asset's inputs and outputs live: the current dataset, a family's
current model, a fresh run directory, and publishing a finished run as the current one."""

import time
from pathlib import Path

import dagster as dg

from foxhunt_pipeline.storage import dataset_store, model_store
from models.windows import TrainingData
from resources.storage import FoxhuntStorage


def deterministic_failure(family: str, error: Exception) -> dg.Failure:
    """A failure that the same data and settings would repeat: not retried, so the
    TRANSIENT_RETRY policy (meant for a lost node or device) does not rerun it."""
    return dg.Failure(
        description=f"{family}: {error}. Not retried: the same dataset and settings fail the "
        "same way; check the training_dataset_finite check, or lower learning_rate / set "
        "grad_clip",
        allow_retries=False,
    )


def dataset_path(storage: FoxhuntStorage) -> Path:
    """The current training dataset's local directory (a copy when it lives on object storage)."""
    try:
        return dataset_store.local_dir(storage.warehouse_root, storage.scratch / "cache")
    except FileNotFoundError as e:
        raise dg.Failure(f"{e}: materialize training_dataset first") from e


def load_dataset(storage: FoxhuntStorage) -> TrainingData:
    """The current training dataset, copied locally when it lives on object storage."""
    return TrainingData.load(dataset_path(storage))


def load_current_model(storage: FoxhuntStorage, family: str) -> tuple[dict, Path]:
    """The family's current pointer with ``checkpoint`` naming a local copy (what the
    loaders need), and the local run directory that outputs are written beside."""
    try:
        pointer, checkpoint, run_dir = storage.current_model(family)
    except FileNotFoundError as e:
        raise dg.Failure(str(e)) from e
    return {**pointer, "checkpoint": str(checkpoint)}, run_dir


def new_run_dir(storage: FoxhuntStorage, family: str, run_id: str) -> Path:
    """A fresh local directory for one training run (inside the checkpoints root when local)."""
    name = f"{time.strftime('%Y%m%dT%H%M%S')}-{run_id[:8]}"
    return model_store.work_dir(storage.checkpoints_root, storage.scratch, family, name)


def publish_run(storage: FoxhuntStorage, family: str, run_dir: Path, checkpoint: Path,
                record: dict) -> str:
    """Store the finished run directory, then point the family at it; returns the run
    directory's durable location (a path, or a URL on object storage)."""
    where = model_store.store_run(storage.checkpoints_root, family, run_dir)
    model_store.publish(storage.checkpoints_root, family, {
        "family": family, "checkpoint": model_store.located(where, run_dir, checkpoint),
        "run_dir": where, **record})
    return where
