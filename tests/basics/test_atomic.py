"""The one atomic write: temp beside the target, fsync, rename; nothing left on failure."""

import os
from pathlib import Path

import pytest

from foxhunt_pipeline.basics import atomic
from foxhunt_pipeline.basics.atomic import atomic_replace_dir, atomic_write


def _fsynced(monkeypatch) -> list[str]:
    seen: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        seen.append(os.readlink(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd")
                    else str(fd))
        real(fd)

    monkeypatch.setattr(atomic.os, "fsync", spy)
    return seen


def test_write_fsyncs_the_temp_file_before_renaming_it_onto_the_target(tmp_path: Path,
                                                                       monkeypatch):
    seen = _fsynced(monkeypatch)
    target = tmp_path / "sub" / "x.json"
    atomic_write(target, lambda tmp: tmp.write_text("old"))
    written: list[Path] = []
    atomic_write(target, lambda tmp: (written.append(tmp), tmp.write_text("new")))
    assert target.read_text() == "new"
    assert written[0].parent == target.parent and written[0] != target
    assert str(written[0]) in seen  # the data reached the disk before the rename
    assert str(target.parent) in seen  # and so did the directory entry
    assert sorted(p.name for p in target.parent.iterdir()) == ["x.json"]


def test_a_failing_write_leaves_the_old_file_and_no_temp(tmp_path: Path):
    target = tmp_path / "x.bin"
    target.write_bytes(b"good")

    def fail(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(target, fail)
    assert target.read_bytes() == b"good"
    assert [p.name for p in tmp_path.iterdir()] == ["x.bin"]


def test_no_overwrite_keeps_an_existing_file(tmp_path: Path):
    target = tmp_path / "landed.dbn.zst"
    target.write_bytes(b"landed")
    with pytest.raises(FileExistsError):
        atomic_write(target, lambda tmp: tmp.write_bytes(b"other"), overwrite=False)
    assert target.read_bytes() == b"landed"
    assert [p.name for p in tmp_path.iterdir()] == ["landed.dbn.zst"]
    fresh = atomic_write(tmp_path / "new.dbn.zst", lambda tmp: tmp.write_bytes(b"n"),
                         overwrite=False)
    assert fresh.read_bytes() == b"n"


def test_directory_swap_fsyncs_every_file_and_replaces_the_old_tree(tmp_path: Path,
                                                                    monkeypatch):
    seen = _fsynced(monkeypatch)
    target = tmp_path / "dataset"
    (target / "train").mkdir(parents=True)
    (target / "train" / "stale.npy").write_bytes(b"old")

    def build(tmp: Path) -> None:
        (tmp / "train").mkdir()
        (tmp / "train" / "x.npy").write_bytes(b"new")

    atomic_replace_dir(target, build)
    assert [p.relative_to(target).as_posix() for p in sorted(target.rglob("*"))] == \
        ["train", "train/x.npy"]
    # every file was flushed inside the temp tree, before the rename made it visible
    assert any(s.endswith("/train/x.npy") and Path(s).parent.parent.name.startswith(".dataset.")
               for s in seen)
    assert [p.name for p in tmp_path.iterdir()] == ["dataset"]  # no temp, no old copy


def test_a_failing_directory_build_keeps_the_old_tree_and_removes_the_temp(tmp_path: Path):
    target = tmp_path / "export"
    target.mkdir()
    (target / "model.pt").write_bytes(b"good")

    def fail(tmp: Path) -> None:
        (tmp / "model.pt").write_bytes(b"half")
        raise ValueError("trace failed")

    with pytest.raises(ValueError, match="trace failed"):
        atomic_replace_dir(target, fail)
    assert (target / "model.pt").read_bytes() == b"good"
    assert [p.name for p in tmp_path.iterdir()] == ["export"]
    with pytest.raises(FileExistsError):
        atomic_replace_dir(target, lambda tmp: None, overwrite=False)
    assert (target / "model.pt").read_bytes() == b"good"
    assert [p.name for p in tmp_path.iterdir()] == ["export"]
