"""Scratch space per run, and the start-up sweep of what killed processes left behind.

A writer that is ``kill -9``-ed runs no ``finally``: its temp file beside a target
(``foxhunt_pipeline.basics.atomic``), its staging parquet, its spill directory stay. So every such name
says who owns it (host tag and pid), and ``sweep`` removes the ones whose owner is no
longer alive on this host; a live writer's files are never touched, so the sweep is safe
while other runs write. It runs once per process and home, at the start of every Dagster
run that uses the storage resource and at the start of ``foxhunt materialize`` / ``demo``
/ ``ui``.

Layout: ``$FOXHUNT_HOME/scratch/runs/<id>.<host>-<pid>/`` is one process's scratch area
(staging parquet, spill files, copies of landed objects, datasets before upload), removed
when the run ends, failed or not. ``scratch/cache`` (downloaded checkpoints and datasets)
is kept.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

from foxhunt_pipeline.basics.atomic import host_tag, owner_tag, temp_owner

RUNS_DIR = "runs"
# "<id>.<host>-<pid>": a run process's scratch area
_AREA_NAME = re.compile(r"^[0-9a-f]+\.(?P<host>[0-9a-f]{8})-(?P<pid>\d+)$")
# ".<name>.old-<pid>": the previous version during a directory swap (models.windows, export)
_OLD_NAME = re.compile(r"^\.(?P<name>.+)\.old-(?P<pid>\d+)$")
# names written by versions before owner tags: removed once they have not changed for an hour
_LEGACY_TEMP = re.compile(r"^\..+\.(?:[0-9a-f]{32}\.tmp|[a-z0-9_]{8}\.tmp|[a-z0-9_]{8})$")
_LEGACY_SCRATCH = ("staging", "landed")
LEGACY_AGE_S = 3600.0

_swept: set[Path] = set()


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists here (one of another user's counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError as e:
        return e.errno != errno.ESRCH
    return True


def _orphaned(host: str, pid: int) -> bool:
    return host == host_tag() and pid != os.getpid() and not pid_alive(pid)


def new_area(scratch: Path) -> Path:
    """A fresh scratch directory for this process, named after its owner."""
    area = Path(scratch) / RUNS_DIR / f"{uuid.uuid4().hex[:12]}.{owner_tag()}"
    area.mkdir(parents=True)
    return area


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _stale_legacy(path: Path, now: float) -> bool:
    try:
        return now - path.stat().st_mtime > LEGACY_AGE_S
    except OSError:
        return False


def _sweep_entry(path: Path, now: float, legacy: bool) -> bool | None:
    """None: not a temp name. Else whether ``path``, a temp file or directory, was removed
    (its owner is dead); the walk never descends into a temp directory."""
    name = path.name
    owner = temp_owner(name)
    if owner is not None:
        if _orphaned(*owner):
            remove(path)
            return True
        return False
    old = _OLD_NAME.match(name)
    if old is not None:
        if not _orphaned(host_tag(), int(old["pid"])):
            return False
        target = path.with_name(old["name"])
        if target.exists():
            remove(path)
        else:  # killed between the two renames of a swap: the old version goes back
            os.replace(path, target)
        return True
    if legacy and (_LEGACY_TEMP.match(name) or name.startswith(".ingest-")):
        if _stale_legacy(path, now):
            remove(path)
            return True
        return False
    return None


def sweep_tree(root: Path, *, legacy: bool = True) -> list[Path]:
    """Remove dead processes' temp files and directories anywhere under ``root``; with
    ``legacy``, also temp names of older versions untouched for an hour."""
    root = Path(root)
    if not root.is_dir():
        return []
    now = time.time()
    removed: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        for name in filenames:
            if name.startswith(".") and _sweep_entry(base / name, now, legacy):
                removed.append(base / name)
        keep = []
        for name in dirnames:
            verdict = _sweep_entry(base / name, now, legacy) if name.startswith(".") else None
            if verdict is None:
                keep.append(name)
            elif verdict:
                removed.append(base / name)
        dirnames[:] = keep
    return removed


def sweep_scratch(scratch: Path) -> list[Path]:
    """Remove the scratch areas of dead processes, and pre-area staging / landed copies."""
    scratch = Path(scratch)
    removed: list[Path] = []
    runs = scratch / RUNS_DIR
    if runs.is_dir():
        for area in runs.iterdir():
            m = _AREA_NAME.match(area.name)
            if m and _orphaned(m["host"], int(m["pid"])):
                remove(area)
                removed.append(area)
    now = time.time()
    for legacy in _LEGACY_SCRATCH:
        d = scratch / legacy
        if d.is_dir():
            for p in d.iterdir():
                if _stale_legacy(p, now):
                    remove(p)
                    removed.append(p)
    for p in scratch.glob("dataset-*"):
        if _stale_legacy(p, now):
            remove(p)
            removed.append(p)
    return removed + sweep_tree(scratch / "cache")


def sweep(home: Path, trees: Iterable[Path] = (), landing: Path | None = None, *,
          force: bool = False) -> list[Path]:
    """Sweep ``home/scratch``, ``trees`` (the local warehouse and checkpoints) and the
    landing zone (owner-tagged names only: a user's own dot-files there are not ours);
    once per process and home unless ``force``. Returns what was removed."""
    home = Path(home)
    if home in _swept and not force:
        return []
    _swept.add(home)
    removed = sweep_scratch(home / "scratch")
    now = time.time()
    for p in home.iterdir() if home.is_dir() else ():  # the catalogue's copy being written
        if p.is_file() and _sweep_entry(p, now, legacy=False):
            removed.append(p)
    for tree in trees:
        removed += sweep_tree(Path(tree))
    if landing is not None:
        removed += sweep_tree(Path(landing), legacy=False)
    return removed
