"""One atomic write for every writer (parquet, checkpoints, exports, catalogue files): a
temp file beside the target, fsync, rename. Here, in the lowest layer, so ``models`` can
use it too.

Every temp name carries its owner (a host tag and the pid), so a start-up sweep can tell
the leftovers of a killed process (``kill -9`` skips every ``finally``) from the files a
live writer is still filling: see ``temp_owner``."""

from __future__ import annotations

import hashlib
import os
import re
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


def atomic_write(dest: Path | str, write: Callable[[Path], None]) -> Path:
    """Run ``write(tmp)`` on a temp path beside ``dest``, fsync it, then ``os.replace`` it
    onto ``dest``: a reader sees the old file or the new one, never a torn one, even after
    a power cut. On any exception the temp file is removed and ``dest`` is untouched."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(dest)
    try:
        write(tmp)
        fsync_path(tmp)
        os.replace(tmp, dest)
        fsync_path(dest.parent)
    finally:
        if tmp.exists():
            tmp.unlink()
    return dest


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
