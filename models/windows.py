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
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from models.atomic import temp_dir_beside

SPLITS = ("train", "validation", "test")
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
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_dir_beside(path)
        try:
            for name, split in self.splits.items():
                d = tmp / name
                d.mkdir()
                for a in (*ARRAYS, "window_starts"):
                    np.save(d / f"{a}.npy", getattr(split, a), allow_pickle=False)
            (tmp / "meta.json").write_text(json.dumps(self.meta, indent=2, default=_json_default))
            old = None
            if path.exists():
                old = path.with_name(f".{path.name}.old-{os.getpid()}")
                os.replace(path, old)
            os.replace(tmp, path)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str], mmap: bool = True) -> TrainingData:
        path = Path(path)
        meta = json.loads((path / "meta.json").read_text())
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


def synthetic_training_data(
    n_rows: Mapping[str, int] | None = None,
    n_observed: int = 12,
    n_known: int = 10,
    n_static: int = 5,
    lookback: int = 60,
    horizon: int = 5,
    signal: float = 0.5,
    segment_length: int = 400,
    seed: int = 0,
) -> TrainingData:
    """A small dataset in the real format, for tests of models that should not need
    the ingestion and feature layers. ``observed[:, 0]`` carries a lagged signal of
    the next return with strength ``signal`` (0 = pure noise)."""
    rng = np.random.default_rng(seed)
    n_rows = dict(n_rows or {"train": 3000, "validation": 800, "test": 800})
    splits: dict[str, SplitArrays] = {}
    t0 = np.int64(1_704_067_200_000_000_000)  # 2024-01-01T00:00Z
    seg_base = 0
    for name, n in n_rows.items():
        ret = rng.standard_normal(n) * 1e-3
        observed = rng.standard_normal((n, n_observed)).astype(np.float32)
        # ret[i] is the return from row i to row i + 1, so observed[i, 0] predicts targets[i, 0]
        observed[:, 0] = (signal * ret / 1e-3 + np.sqrt(max(1 - signal**2, 0.0)) * observed[:, 0]).astype(np.float32)
        minute = np.arange(n) % 1380
        known = np.zeros((n, n_known), dtype=np.float32)
        known[:, 0] = np.sin(2 * np.pi * minute / 1380)
        known[:, 1] = np.cos(2 * np.pi * minute / 1380)
        if n_known > 2:
            known[:, 2:] = rng.standard_normal((n, n_known - 2)) * 0.1
        segment = (seg_base + np.arange(n) // segment_length).astype(np.int32)
        seg_base = int(segment[-1]) + 1
        targets = np.full((n, horizon), np.nan, dtype=np.float32)
        for h in range(1, horizon + 1):
            csum = np.concatenate([[0.0], np.cumsum(ret)])
            fwd = csum[np.minimum(np.arange(n) + h, n)] - csum[np.arange(n)]
            ok = (np.arange(n) + h < n) & (segment[np.minimum(np.arange(n) + h, n - 1)] == segment)
            targets[ok, h - 1] = fwd[ok]
        root_index = (segment % 2).astype(np.int16)
        static = np.stack([np.full(n, v, dtype=np.float32) for v in range(n_static)], axis=1)
        static[:, 0] = root_index
        ts = t0 + np.arange(n, dtype=np.int64) * 60_000_000_000
        t0 = ts[-1] + 86_400_000_000_000
        splits[name] = SplitArrays(
            observed=observed,
            known=known,
            static=static,
            targets=targets,
            ts_event=ts,
            segment=segment,
            root_index=root_index,
            window_starts=valid_window_starts(segment, targets, lookback, horizon),
        )
    h1 = splits["train"].targets[:, 0] if "train" in splits else next(iter(splits.values())).targets[:, 0]
    meta = {
        "format_version": 1,
        "lookback": lookback,
        "horizon": horizon,
        "quantiles": list(DEFAULT_QUANTILES),
        "observed_names": [f"f_{i}" for i in range(n_observed)],
        "known_names": [f"k_{i}" for i in range(n_known)],
        "static_names": [f"s_{i}" for i in range(n_static)],
        "target_names": [f"y_{h}" for h in range(1, horizon + 1)],
        "roots": ["ES", "ZN"],
        "cost_log_return": [2e-5, 2e-5],
        "bar_seconds": 60,
        "bars_per_year": 252 * 1380,
        "target_scale": float(np.nanstd(h1)),
        "feature_hash": "synthetic",
        "splits": {k: {"rows": v.n_rows, "windows": v.n_windows} for k, v in splits.items()},
    }
    return TrainingData(meta=meta, splits=splits)
