"""One atomic write for every writer (parquet, checkpoints, exports, catalogue files): a
temp file beside the target, fsync, rename. Here, in the lowest layer, so ``models`` can
use it too."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path


def atomic_write(dest: Path | str, write: Callable[[Path], None]) -> Path:
    """Run ``write(tmp)`` on a temp path beside ``dest``, fsync it, then ``os.replace`` it
    onto ``dest``: a reader sees the old file or the new one, never a torn one, even after
    a power cut. On any exception the temp file is removed and ``dest`` is untouched."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.{uuid.uuid4().hex}.tmp"
    try:
        write(tmp)
        _fsync(tmp)
        os.replace(tmp, dest)
        _fsync(dest.parent)
    finally:
        if tmp.exists():
            tmp.unlink()
    return dest


def _fsync(path: Path) -> None:
    """Flush a file's (or a directory entry's) data to disk; a no-op where the OS refuses."""
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if path.is_dir() else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
