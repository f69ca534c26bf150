"""One atomic write for every writer (parquet, checkpoints, exports, catalogue files,
landed DBN files, dataset and export directories): build beside the target, fsync,
rename. Here, in the lowest layer, so ``models`` can use it too."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path


def atomic_write(dest: Path | str, write: Callable[[Path], object], *,
                 overwrite: bool = True) -> Path:
    """Run ``write(tmp)`` on a temp path beside ``dest``, fsync it, then rename it onto
    ``dest``: a reader sees the old file or the new one, never a torn one, even after a
    power cut. ``overwrite=False`` never replaces an existing ``dest`` (a landed file):
    it raises ``FileExistsError`` instead, atomically. On any exception the temp file is
    removed and ``dest`` is untouched."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.{uuid.uuid4().hex}.tmp"
    try:
        write(tmp)
        _fsync(tmp)
        if overwrite:
            os.replace(tmp, dest)
        else:
            _rename_no_clobber(tmp, dest)
        _fsync(dest.parent)
    finally:
        if tmp.exists():
            tmp.unlink()
    return dest


def atomic_replace_dir(dest: Path | str, build: Callable[[Path], object], *,
                       overwrite: bool = True) -> Path:
    """Run ``build(tmp)`` on an empty temp directory beside ``dest``, fsync every file in
    it, then rename it onto ``dest``. A directory cannot be renamed over a non-empty one,
    so an existing ``dest`` is first moved aside and removed once the new one is in
    place (a reader may find ``dest`` missing for that instant, never half-written).
    ``overwrite=False`` raises ``FileExistsError`` if ``dest`` exists (or appears
    meanwhile). On any exception the temp directory is removed and ``dest`` is kept."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    old: Path | None = None
    try:
        build(tmp)
        _fsync_tree(tmp)
        if dest.exists():
            if not overwrite:
                raise FileExistsError(errno.EEXIST, "already exists", str(dest))
            old = dest.parent / f".{dest.name}.{uuid.uuid4().hex}.old"
            os.replace(dest, old)
        try:
            os.rename(tmp, dest)
        except OSError as exc:
            if old is not None:
                os.replace(old, dest)
                old = None
            elif dest.exists() and exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                raise FileExistsError(errno.EEXIST, "already exists", str(dest)) from exc
            raise
        _fsync(dest.parent)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return dest


def _rename_no_clobber(src: Path, dest: Path) -> None:
    """``src`` to ``dest`` unless ``dest`` exists: a hard link fails atomically on an
    existing name; where links are not supported, check then rename."""
    try:
        os.link(src, dest)
    except FileExistsError:
        raise
    except OSError:
        if dest.exists():
            raise FileExistsError(errno.EEXIST, "already exists", str(dest)) from None
        os.replace(src, dest)
        return
    src.unlink()


def _fsync_tree(root: Path) -> None:
    for directory, _, files in os.walk(root):
        for name in files:
            _fsync(Path(directory) / name)
        _fsync(Path(directory))


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
