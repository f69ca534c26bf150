"""The training dataset on disk and the windows every model consumes.

Stored compactly: one row-aligned matrix per split plus the start index of each
valid window, never copied windows. A window starting at row ``s`` covers
history rows ``s .. s+T-1``, known inputs ``s .. s+T+H-1`` and the targets of
row ``s+T-1`` (forward log returns at horizons 1..H from the last history bar).
All rows of a window share one segment (root x contract), so no window spans a
roll. Layout of a dataset directory::

    meta.json
    <split>/observed.npy     float32 [N, F]  normalised with train-only stats
    <split>/known.npy        float32 [N, K]  calendar inputs, known in advance
    <split>/static.npy       float32 [N, S]  per-root constants, per row
    <split>/targets.npy      float32 [N, H]  raw forward log returns (NaN at ends)
    <split>/ts_event.npy     int64   [N]     ns since epoch, UTC
    <split>/segment.npy      int32   [N]     segment id (root x contract)
    <split>/root_index.npy   int16   [N]     index into meta["roots"]
    <split>/window_starts.npy int64  [W]

The incremental dataset (``foxhunt_pipeline.features.dataset_dates``) stores raw per-date
blocks instead; its ``meta.json`` carries a ``layout`` (:data:`LAYOUT`) and
``foxhunt_pipeline.storage.dataset_store.local_dir`` materialises the directory above from
it, so every reader loads the same arrays.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from foxhunt_pipeline.basics.atomic import atomic_replace_dir

SPLITS = ("train", "validation", "test")
#: the ``meta.json`` key of a dataset stored as per-date blocks (not loadable as arrays here)
LAYOUT = "layout"
ARRAYS = ("observed", "known", "static", "targets", "ts_event", "segment", "root_index")
DEFAULT_QUANTILES = tuple(round(0.1 * i, 1) for i in range(1, 10))


@dataclass
class SplitArrays:
    observed: np.ndarray
    known: np.ndarray
    static: np.ndarray
    targets: np.ndarray
    ts_event: np.ndarray
    segment: np.ndarray
    root_index: np.ndarray
    window_starts: np.ndarray

    @property
    def n_rows(self) -> int:
        return int(self.observed.shape[0])

    @property
    def n_windows(self) -> int:
        return int(self.window_starts.shape[0])

    def nbytes(self) -> int:
        return int(sum(getattr(self, a).nbytes for a in (*ARRAYS, "window_starts")))


@dataclass
class TrainingData:
    """A loaded dataset: the three splits plus ``meta`` (names, stats, costs)."""

    meta: dict[str, Any]
    splits: dict[str, SplitArrays] = field(default_factory=dict)

    @property
    def lookback(self) -> int:
        return int(self.meta["lookback"])

    @property
    def horizon(self) -> int:
        return int(self.meta["horizon"])

    @property
    def target_scale(self) -> float:
        """Train std of the horizon-1 return; models learn targets / target_scale."""
        return float(self.meta["target_scale"])

    @property
    def observed_names(self) -> list[str]:
        return list(self.meta["observed_names"])

    @property
    def known_names(self) -> list[str]:
        return list(self.meta["known_names"])

    @property
    def static_names(self) -> list[str]:
        return list(self.meta["static_names"])

    def cost_log_return(self, split: str) -> np.ndarray:
        """Per-row one-way cost of a one-contract position change, as a log return."""
        per_root = np.asarray(self.meta["cost_log_return"], dtype=np.float64)
        return per_root[self.splits[split].root_index.astype(np.int64)]

    def window_dataset(self, split: str) -> WindowDataset:
        return WindowDataset(self.splits[split], self.lookback, self.horizon, self.target_scale)

    # --- persistence -------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write atomically: build in a sibling temp dir, then swap it in."""
        def build(tmp: Path) -> None:
            self.write_into(tmp)

        return atomic_replace_dir(Path(path), build)

    def write_into(self, path: Path) -> None:
        """The dataset's files in ``path`` (an empty directory). An array loaded from a .npy
        file is hard-linked (or copied file to file), never read into memory."""
        for name, split in self.splits.items():
            d = Path(path) / name
            d.mkdir(parents=True, exist_ok=True)
            for a in (*ARRAYS, "window_starts"):
                arr = getattr(split, a)
                source = _whole_npy_file(arr)
                if source is not None:  # a finished, never rewritten file: link it, else copy it
                    try:
                        os.link(source, d / f"{a}.npy")
                    except OSError:
                        shutil.copyfile(source, d / f"{a}.npy")
                else:
                    np.save(d / f"{a}.npy", arr, allow_pickle=False)
        (Path(path) / "meta.json").write_text(json.dumps(self.meta, indent=2, default=_json_default))

    @classmethod
    def load(cls, path: str | os.PathLike[str], mmap: bool = True) -> TrainingData:
        path = Path(path)
        meta = json.loads((path / "meta.json").read_text())
        if LAYOUT in meta:
            raise ValueError(f"{path} holds a dataset stored as per-date blocks: read it with "
                             "foxhunt_pipeline.storage.dataset_store.load (or local_dir)")
        mode = "r" if mmap else None
        splits = {}
        for name in SPLITS:
            d = path / name
            if not d.exists():
                continue
            arrays = {
                a: np.load(d / f"{a}.npy", mmap_mode=mode, allow_pickle=False)
                for a in (*ARRAYS, "window_starts")
            }
            splits[name] = SplitArrays(**arrays)
        return cls(meta=meta, splits=splits)


def _whole_npy_file(arr: np.ndarray) -> Path | None:
    """The .npy file ``arr`` maps whole (``np.load(..., mmap_mode=...)``), else None."""
    if not isinstance(arr, np.memmap) or not isinstance(arr.base, mmap.mmap) or not arr.filename:
        return None
    path = Path(arr.filename)
    return path if path.suffix == ".npy" and arr.offset > 0 else None


class NpyWriter:
    """A 2-D .npy file written block by block in row order, its shape known up front: a
    split larger than memory is stored without ever being whole in memory."""

    def __init__(self, path: Path, rows: int, cols: int, dtype: Any = np.float32):
        self.path, self.shape, self.dtype, self.rows = Path(path), (rows, cols), np.dtype(dtype), 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "wb")  # noqa: SIM115  (closed by close())
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
                  "shape": self.shape}
        np.lib.format.write_array_header_2_0(self._fh, header)

    def __setitem__(self, at: slice, block: np.ndarray) -> None:
        if at.start != self.rows:
            raise ValueError(f"{self.path}: rows must be written in order ({at.start} != {self.rows})")
        block = np.ascontiguousarray(block, dtype=self.dtype).reshape(-1, self.shape[1])
        self._fh.write(block.tobytes())
        self.rows += block.shape[0]
        if self.rows >= self.shape[0]:  # complete: closed at once, even if close() is never reached
            self._fh.close()

    def close(self) -> None:
        self._fh.close()
        if self.rows != self.shape[0]:
            raise ValueError(f"{self.path}: {self.rows} rows written of {self.shape[0]}")


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o)}")


class WindowDataset(Dataset):
    """Slices windows as views of the split matrices; targets scaled by ``target_scale``."""

    def __init__(self, split: SplitArrays, lookback: int, horizon: int, target_scale: float = 1.0):
        self.split = split
        self.lookback = lookback
        self.horizon = horizon
        self.target_scale = float(target_scale)

    def __len__(self) -> int:
        return self.split.n_windows

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        s = int(self.split.window_starts[i])
        t, h = self.lookback, self.horizon
        last = s + t - 1
        return {
            "static": torch.from_numpy(np.array(self.split.static[last], dtype=np.float32)),
            "observed": torch.from_numpy(np.array(self.split.observed[s : s + t], dtype=np.float32)),
            "known": torch.from_numpy(np.array(self.split.known[s : s + t + h], dtype=np.float32)),
            "target": torch.from_numpy(
                np.array(self.split.targets[last], dtype=np.float32) / self.target_scale
            ),
        }

    def batch(self, indices: np.ndarray | list[int]) -> dict[str, torch.Tensor]:
        """Gather many windows at once (fancy indexing, no Python loop per row)."""
        starts = np.asarray(self.split.window_starts)[np.asarray(indices, dtype=np.int64)]
        t, h = self.lookback, self.horizon
        hist = starts[:, None] + np.arange(t)[None, :]
        fut = starts[:, None] + np.arange(t + h)[None, :]
        last = starts + t - 1
        return {
            "static": torch.from_numpy(np.asarray(self.split.static[last], dtype=np.float32)),
            "observed": torch.from_numpy(np.asarray(self.split.observed[hist], dtype=np.float32)),
            "known": torch.from_numpy(np.asarray(self.split.known[fut], dtype=np.float32)),
            "target": torch.from_numpy(
                np.asarray(self.split.targets[last], dtype=np.float32) / self.target_scale
            ),
        }


def to_device(batch: Mapping[str, torch.Tensor], device: torch.device | str
              ) -> dict[str, torch.Tensor]:
    """A batch on ``device``: pinned and non-blocking on CUDA, untouched on CPU."""
    device = torch.device(device)
    if device.type == "cpu":
        return dict(batch)
    if device.type == "cuda":
        return {k: v.pin_memory().to(device, non_blocking=True) for k, v in batch.items()}
    return {k: v.to(device) for k, v in batch.items()}


def valid_window_starts(segment: np.ndarray, targets: np.ndarray, lookback: int, horizon: int) -> np.ndarray:
    """Starts ``s`` whose T+H rows share a segment and whose last history row has all targets."""
    n = segment.shape[0]
    span = lookback + horizon
    if n < span:
        return np.zeros(0, dtype=np.int64)
    starts = np.arange(n - span + 1)
    same = segment[starts] == segment[starts + span - 1]
    # segments are contiguous runs, so equal ends imply equal throughout
    finite = np.isfinite(np.asarray(targets)[starts + lookback - 1]).all(axis=1)
    return starts[same & finite].astype(np.int64)


def take_rows(array: Any, rows: np.ndarray) -> np.ndarray:
    """``array[rows]`` of a split array, held or kept in a file (a fold's large train part,
    ``models.evaluation.row_pool.SpilledRows``: only those rows are read)."""
    return array[rows] if hasattr(array, "blocks") else np.asarray(array)[rows]


def hash_array(h: Any, array: Any) -> None:
    """Feed ``array``'s bytes in C order to the hash ``h``; an array kept in a file is fed a
    block of rows at a time (the same bytes, so the same digest, never the whole in memory)."""
    blocks = getattr(array, "blocks", None)
    for block in (blocks() if blocks is not None else [array]):
        h.update(np.ascontiguousarray(block).view(np.uint8))


def recent_rows(data: TrainingData, limits: Mapping[str, int | None]) -> TrainingData:
    """``data`` with each split named in ``limits`` cut to its most recent rows: ``limit``
    in all, shared evenly by the roots, each root's rows kept in order (a split with no more
    rows than that, or a ``None`` limit, is kept whole: the very same object)."""
    splits = dict(data.splits)
    for name, limit in limits.items():
        part = splits.get(name)
        if part is None or limit is None or part.n_rows <= limit:
            continue
        root = np.asarray(part.root_index)
        roots = np.unique(root)
        per_root = max(1, int(limit) // roots.size)
        keep = np.sort(np.concatenate([np.flatnonzero(root == r)[-per_root:] for r in roots]))
        cut = {a: take_rows(getattr(part, a), keep) for a in ARRAYS}
        splits[name] = SplitArrays(**cut, window_starts=valid_window_starts(
            cut["segment"], cut["targets"], data.lookback, data.horizon))
    return TrainingData(meta=data.meta, splits=splits)
