"""Which checkpoint is current for each model family: a small JSON pointer per family,
replaced whole, so evaluation and quantization read exactly what training published.

The root is a local directory or an object-store URL (``FOXHUNT_ARTIFACTS_URL``). On a store,
a run's directory is uploaded before its pointer is written, and readers get a local copy
of the run directory through :func:`local_checkpoint`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from upath import UPath

from foxhunt_pipeline.storage import artifact_sync as sync

Root = str | os.PathLike[str]


def pointer_path(checkpoints: Root, family: str) -> UPath:
    return sync.as_upath(checkpoints) / family / "current.json"


def work_dir(checkpoints: Root, scratch: Path, family: str, run_name: str) -> Path:
    """Where a training run writes: inside the root when it is local, else in local scratch."""
    local = sync.local_path(checkpoints)
    base = local if local is not None else Path(scratch) / "checkpoints"
    return base / family / run_name


def store_run(checkpoints: Root, family: str, run_dir: Path) -> str:
    """Make a finished run directory durable; returns its location (a path or a URL)."""
    if sync.local_path(checkpoints) is not None:
        return str(run_dir)
    dest = sync.as_upath(checkpoints) / family / Path(run_dir).name
    return str(sync.put_tree(Path(run_dir), dest))


def located(run_location: str, run_dir: Path, path: Path) -> str:
    """``path`` (inside the local ``run_dir``) as it is named at the run's durable location."""
    rel = Path(path).relative_to(run_dir).as_posix()
    return str(sync.as_upath(run_location) / rel)


def publish(checkpoints: Root, family: str, record: dict[str, Any]) -> UPath:
    return sync.write_json(pointer_path(checkpoints, family), record)


def current(checkpoints: Root, family: str) -> dict[str, Any]:
    path = pointer_path(checkpoints, family)
    if not path.is_file():
        raise FileNotFoundError(
            f"no trained {family} model under {path.parent}: materialize the {family} training asset first"
        )
    return _rebased(sync.read_json(path), checkpoints, family)


def _rebased(pointer: dict[str, Any], checkpoints: Root, family: str) -> dict[str, Any]:
    """Local paths recorded under another checkpoints root (the home was moved or copied)
    named under this root instead, when the run is there: reads and the outputs written
    beside a run then stay in this home."""
    root = sync.local_path(checkpoints)
    if root is None:
        return pointer
    out = dict(pointer)
    for key in ("checkpoint", "run_dir"):
        value = out.get(key)
        local = sync.local_path(value) if isinstance(value, str) else None
        if local is None or not local.is_absolute() or local.is_relative_to(root):
            continue
        parts = local.parts
        idx = max((i for i, p in enumerate(parts) if p == family), default=None)
        if idx is not None and (root.joinpath(*parts[idx:])).exists():
            out[key] = str(root.joinpath(*parts[idx:]))
    return out


def local_run_dir(pointer: dict[str, Any], cache: Path) -> Path:
    """The run directory of ``pointer`` on local disk (downloaded once into ``cache``)."""
    run = pointer.get("run_dir")
    if run is None:  # pointers written before run_dir was recorded: local checkpoints
        return Path(pointer["checkpoint"]).parent
    local = sync.local_path(run)
    if local is not None:
        return local
    return sync.get_tree(sync.as_upath(run), Path(cache) / pointer["family"] / sync.as_upath(run).name)


def local_checkpoint(pointer: dict[str, Any], cache: Path) -> Path:
    """The pointer's checkpoint as a local path, for loaders that need a file on disk."""
    run = pointer.get("run_dir")
    if run is None or sync.local_path(run) is not None:
        return Path(sync.local_path(pointer["checkpoint"]) or pointer["checkpoint"])
    return local_run_dir(pointer, cache) / sync.relative_name(pointer["checkpoint"], run)
