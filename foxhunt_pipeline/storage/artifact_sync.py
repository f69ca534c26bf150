"""Directories of artifacts (checkpoints, the training dataset) on a local or object-store root.

Training writes checkpoints and datasets as directories of files that torch and numpy load or
memory-map from local disk. On a local root those directories are the store itself. On an
``s3://`` / ``gs://`` / ``memory://`` root a directory is uploaded once it is complete, and a
reader downloads it to a local cache before use; a small JSON pointer, written last in one
PUT, names the complete version, so no reader ever sees half an upload.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from upath import UPath

from foxhunt_pipeline.basics.atomic import atomic_replace_dir, atomic_write
from foxhunt_pipeline.storage.object_store import is_local


def as_upath(location: str | os.PathLike[str]) -> UPath:
    return location if isinstance(location, UPath) else UPath(location)


def local_path(location: str | os.PathLike[str]) -> Path | None:
    """The local filesystem path of ``location``, or None when it lives in an object store."""
    up = as_upath(location)
    return Path(up.path) if is_local(up) else None


def relative_name(location: str | os.PathLike[str], base: str | os.PathLike[str]) -> str:
    """``location`` relative to ``base``, both paths or URLs of one root."""
    root = str(as_upath(base).path).rstrip("/")
    path = str(as_upath(location).path)
    if not path.startswith(root + "/"):
        raise ValueError(f"{location} is not under {base}")
    return path[len(root) + 1:]


def write_json(path: UPath, record: dict[str, Any]) -> UPath:
    """Replace ``path`` whole: ``atomic_write`` locally, one object PUT on a store."""
    text = json.dumps(record, indent=2, default=str)
    local = local_path(path)
    if local is None:
        path.write_text(text)
        return path
    atomic_write(local, lambda tmp: tmp.write_text(text))
    return path


def read_json(path: UPath) -> dict[str, Any]:
    return json.loads(path.read_text())


def put_tree(local_dir: Path, dest: UPath) -> UPath:
    """Upload every file under ``local_dir`` to ``dest`` (same relative names)."""
    local_dir = Path(local_dir)
    if not local_dir.is_dir():
        raise FileNotFoundError(f"no directory to upload at {local_dir}")
    for f in sorted(p for p in local_dir.rglob("*") if p.is_file()):
        target = dest / f.relative_to(local_dir).as_posix()
        target.parent.mkdir(parents=True, exist_ok=True)
        dest.fs.put_file(str(f), target.path)
    return dest


def get_tree(src: UPath, local_dir: Path) -> Path:
    """Download ``src`` into ``local_dir``, whole or not at all (a complete copy is reused)."""
    local_dir = Path(local_dir)
    if local_dir.is_dir():
        return local_dir
    files = [p for p in src.rglob("*") if p.is_file()]
    if not files:
        raise FileNotFoundError(f"nothing to download under {src}")

    def download(tmp: Path) -> None:
        for f in files:
            target = tmp / relative_name(f, src)
            target.parent.mkdir(parents=True, exist_ok=True)
            src.fs.get_file(f.path, str(target))

    try:
        atomic_replace_dir(local_dir, download, overwrite=False)
    except OSError:
        if not local_dir.is_dir():  # another process may have finished the same copy first
            raise
    return local_dir


def publish_version(local_dir: Path, root: UPath, name: str) -> UPath:
    """Upload ``local_dir`` as a new version of ``root/name`` and point ``current.json`` at it."""
    version = uuid.uuid4().hex
    dest = put_tree(local_dir, root / name / "versions" / version)
    write_json(root / name / "current.json", {"version": version, "url": str(dest)})
    return dest


def fetch_current_version(root: UPath, name: str, cache: Path) -> Path:
    """The local copy of the version ``root/name/current.json`` names (downloaded once)."""
    pointer = root / name / "current.json"
    if not pointer.is_file():
        raise FileNotFoundError(f"no {name} at {root / name} (no current.json)")
    record = read_json(pointer)
    # the version's place follows from root, name and id; a local root is named from where it
    # is now, so a moved or copied home never reads (or caches from) its old place
    src = root / name / "versions" / record["version"] if is_local(root) else UPath(record["url"])
    return get_tree(src, Path(cache) / name / record["version"])
