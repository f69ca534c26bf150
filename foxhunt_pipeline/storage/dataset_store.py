"""The training dataset on the warehouse root, local or on object storage.

Locally it is ``<warehouse>/training_dataset/`` (swapped in atomically by
``TrainingData.save``) and memory-mapped in place. On a store each save is a new version
under ``training_dataset/versions/<id>/`` named by ``training_dataset/current.json``; a
trainer downloads the current version once into its local cache and memory-maps that copy.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from upath import UPath

from foxhunt_pipeline.storage import artifact_sync as sync
from models.windows import TrainingData

DATASET_DIR = "training_dataset"


def save(data: TrainingData, root: UPath, scratch: Path) -> str:
    """Store ``data`` as the current dataset; returns where it lives (a path or a URL)."""
    local = sync.local_path(root)
    if local is not None:
        return str(data.save(local / DATASET_DIR))
    Path(scratch).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="dataset-", dir=scratch))
    try:
        data.save(tmp / DATASET_DIR)
        return str(sync.publish_version(tmp / DATASET_DIR, root, DATASET_DIR))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def local_dir(root: UPath, cache: Path) -> Path:
    """A local directory holding the current dataset (FileNotFoundError when there is none)."""
    local = sync.local_path(root)
    if local is None:
        return sync.fetch_current_version(root, DATASET_DIR, Path(cache))
    path = local / DATASET_DIR
    if not (path / "meta.json").is_file():
        raise FileNotFoundError(f"{path} has no training dataset")
    return path


def load(root: UPath, cache: Path, mmap: bool = True) -> TrainingData:
    return TrainingData.load(local_dir(root, cache), mmap=mmap)
