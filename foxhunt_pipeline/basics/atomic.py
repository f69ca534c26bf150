"""One atomic write for every writer (parquet, checkpoints, exports, catalogue files,
landed DBN files, dataset and export directories): build beside the target, fsync,
rename. Here, in the lowest layer, so ``models`` can use it too.

Every temp name carries its owner (a host tag and the pid), so a start-up sweep can tell
the leftovers of a killed process (``kill -9`` skips every ``finally``) from the files a
live writer is still filling: see ``temp_owner``."""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import socket
import uuid
from collections.abc import Callable
from pathlib import Path

# ".<target name>.<host tag>-<pid>.<random>.tmp"; the target part is cut so the whole
# name stays under NAME_MAX (255 bytes) whatever the target is called
# (a DuckDB temp database may have a "<temp>.wal" beside it)
TEMP_NAME = re.compile(
    r"^\..*\.(?P<host>[0-9a-f]{8})-(?P<pid>\d+)\.[0-9a-f]{12}\.tmp(?:\.wal)?$")
_MAX_TARGET_PART = 120


def host_tag() -> str:
    """A short, stable tag of this machine (temp files may sit on a shared disk)."""
    return hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]


def owner_tag() -> str:
    """``<host tag>-<pid>``: who owns a temp file or a scratch directory."""
    return f"{host_tag()}-{os.getpid()}"


def temp_sibling(dest: Path | str) -> Path:
    """A fresh temp path beside ``dest``, named after its owner (see ``temp_owner``)."""
    dest = Path(dest)
    part = dest.name.encode()[:_MAX_TARGET_PART].decode(errors="ignore")
    return dest.parent / f".{part}.{owner_tag()}.{uuid.uuid4().hex[:12]}.tmp"


def temp_dir_beside(dest: Path | str) -> Path:
    """Create and return an empty temp directory beside ``dest`` (for writers that build a
    directory and swap it in)."""
    tmp = temp_sibling(dest)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    tmp.mkdir()
    return tmp


def temp_owner(name: str) -> tuple[str, int] | None:
    """(host tag, pid) of a temp name made by ``temp_sibling``; None for any other name."""
    m = TEMP_NAME.match(name)
    return (m["host"], int(m["pid"])) if m else None


def atomic_write(dest: Path | str, write: Callable[[Path], object], *,
                 overwrite: bool = True) -> Path:
    """Run ``write(tmp)`` on a temp path beside ``dest``, fsync it, then rename it onto
    ``dest``: a reader sees the old file or the new one, never a torn one, even after a
    power cut. ``overwrite=False`` never replaces an existing ``dest`` (a landed file):
    it raises ``FileExistsError`` instead, atomically. On any exception the temp file is
    removed and ``dest`` is untouched."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(dest)
    try:
        write(tmp)
        fsync_path(tmp)
        if overwrite:
            os.replace(tmp, dest)
        else:
            _rename_no_clobber(tmp, dest)
        fsync_path(dest.parent)
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
    tmp = temp_dir_beside(dest)
    old: Path | None = None
    try:
        build(tmp)
        _fsync_tree(tmp)
        if dest.exists():
            if not overwrite:
                raise FileExistsError(errno.EEXIST, "already exists", str(dest))
            old = temp_sibling(dest)
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
        fsync_path(dest.parent)
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
            fsync_path(Path(directory) / name)
        fsync_path(Path(directory))


def fsync_path(path: Path) -> None:
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
