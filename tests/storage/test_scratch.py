"""The start-up sweep removes what dead processes left and nothing a live one still writes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from foxhunt_pipeline.basics.atomic import atomic_write, host_tag, temp_owner, temp_sibling
from foxhunt_pipeline.storage import scratch


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _temp_of(dest: Path, pid: int) -> Path:
    """A temp name as ``temp_sibling`` would give process ``pid``."""
    name = temp_sibling(dest).name.replace(f"-{os.getpid()}.", f"-{pid}.")
    return dest.parent / name


def test_temp_names_carry_their_owner_and_stay_short(tmp_path):
    tmp = temp_sibling(tmp_path / ("x" * 250))
    assert temp_owner(tmp.name) == (host_tag(), os.getpid())
    assert len(tmp.name.encode()) < 255
    assert temp_owner("data.parquet") is None and temp_owner(".data.parquet") is None


def test_sweep_removes_dead_owners_only(tmp_path):
    table = tmp_path / "warehouse" / "features"
    table.mkdir(parents=True)
    (table / "data.parquet").write_bytes(b"good")
    dead = _temp_of(table / "data.parquet", _dead_pid())
    dead.write_bytes(b"half")
    live = _temp_of(table / "data.parquet", os.getppid())  # the test runner's parent: alive
    live.write_bytes(b"being written")
    dead_dir = _temp_of(tmp_path / "warehouse" / "training_dataset", _dead_pid())
    (dead_dir / "train").mkdir(parents=True)
    legacy_old = table / ".data.parquet.0123456789abcdef0123456789abcdef.tmp"
    legacy_new = table / ".data.parquet.fedcba9876543210fedcba9876543210.tmp"
    for p in (legacy_old, legacy_new):
        p.write_bytes(b"x")
    os.utime(legacy_old, (time.time() - 2 * scratch.LEGACY_AGE_S,) * 2)

    removed = scratch.sweep_tree(tmp_path / "warehouse")

    assert set(removed) == {dead, dead_dir, legacy_old}
    assert (table / "data.parquet").read_bytes() == b"good"
    assert live.exists() and legacy_new.exists()


def test_a_swap_killed_half_way_gets_its_previous_version_back(tmp_path):
    old = tmp_path / f".training_dataset.old-{_dead_pid()}"
    old.mkdir()
    (old / "meta.json").write_text("{}")
    scratch.sweep_tree(tmp_path)
    assert (tmp_path / "training_dataset" / "meta.json").is_file()
    assert not old.exists()


def test_scratch_areas_of_dead_processes_and_old_staging_are_removed(tmp_path):
    area = scratch.new_area(tmp_path / "scratch")
    dead_area = area.with_name(area.name.replace(f"-{os.getpid()}", f"-{_dead_pid()}"))
    dead_area.mkdir()
    (dead_area / "x.parquet").write_bytes(b"x")
    staging = tmp_path / "scratch" / "staging" / "abc.parquet"  # written before scratch areas
    staging.parent.mkdir()
    staging.write_bytes(b"x")
    os.utime(staging, (time.time() - 2 * scratch.LEGACY_AGE_S,) * 2)

    removed = scratch.sweep(tmp_path, force=True)

    assert set(removed) == {dead_area, staging}
    assert area.is_dir()  # our own area: alive


def test_atomic_write_leaves_no_temp_on_error(tmp_path):
    def boom(tmp: Path) -> None:
        tmp.write_bytes(b"partial")
        raise RuntimeError("disk said no")

    with pytest.raises(RuntimeError):
        atomic_write(tmp_path / "a.bin", boom)
    assert list(tmp_path.iterdir()) == []
