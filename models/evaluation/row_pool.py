"""The rows a walk-forward cuts its folds from, and each fold's arrays.

``row_pool``: every stored row of a dataset in (root, time) order, with its trade date.
``fold_data``: one fold's train / validation / test parts, embargoed and normalised on the
fold's own train part.

Why the features are read on demand: the pool used to hold every stored row's observed
features in raw units as float64 (a year of two roots: ~690k rows x 261 features = 1.4 GB),
and each fold then copied its train part again for its normalisation (another 0.9 GB, plus
``np.nanstd``'s temporaries of the same size): a year peaked at several GB for a fold that
trains on a fixed budget of batches (issue 41). Here the pool keeps the dataset's own float32
(memory-mapped) splits and an index; a fold's statistics and its normalised float32 parts are
computed a block of rows at a time, with the same float64 operations in the same order as
before, so the values are bit for bit those of the whole-array code
(``tests/models/evaluation/test_row_pool``). A fold's train part larger than ``SPILL_BYTES``
is not even held: ``SpilledRows`` keeps it in a temporary file the trainers read from.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import mmap
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.evaluation.folds import Fold, WalkForwardConfig, WalkForwardError
from models.windows import SPLITS, SplitArrays, TrainingData, valid_window_starts

#: rows converted to float64 at a time (~34 MB for 261 features; a block's few temporaries
#: are what a fold's normalisation adds to the process's peak)
CHUNK_ROWS = 16_384


class PooledObserved:
    """``pool[idx]``: the observed features of pool rows ``idx`` in raw units (float64), read
    from ``sources`` (each split's normalised observed array) through ``source`` / ``row``
    (which split and which row of it each pool row is), then ``x * std + mean``."""

    def __init__(self, sources: Sequence[np.ndarray], source: np.ndarray, row: np.ndarray,
                 mean: np.ndarray | None, std: np.ndarray | None):
        self.sources = list(sources)
        self.source = np.asarray(source, np.int64)
        self.row = np.asarray(row, np.int64)
        self.mean = None if mean is None else np.asarray(mean, np.float64)
        self.std = None if std is None else np.asarray(std, np.float64)
        self.n_features = int(self.sources[0].shape[1]) if self.sources else 0

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.row.shape[0]), self.n_features)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float64)

    @property
    def nbytes(self) -> int:
        return int(self.source.nbytes + self.row.nbytes)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, idx) -> np.ndarray:
        idx = np.arange(len(self))[idx] if not isinstance(idx, np.ndarray) or idx.dtype == bool \
            else idx
        out = np.empty((idx.shape[0], self.n_features), np.float64)
        src, row = self.source[idx], self.row[idx]
        for s, values in enumerate(self.sources):
            at = np.flatnonzero(src == s)
            if at.size:
                out[at] = np.asarray(values[row[at]], np.float64)
                _release(values)
        if self.mean is not None and self.std is not None:
            out *= self.std  # in place: the same float64 operations, no temporaries
            out += self.mean
        return out

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        whole = self[np.arange(len(self))]
        return whole if dtype is None else whole.astype(dtype)


def _release(values: np.ndarray) -> None:
    """Unmap the pages of a memory-mapped split this process has read: they stay in the page
    cache (a later read is a minor fault), but a year's dataset no longer sits in the
    process's resident memory once every fold has read it."""
    base = getattr(values, "base", None)
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    if isinstance(base, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        with contextlib.suppress(OSError, ValueError):  # only memory is at stake
            base.madvise(mmap.MADV_DONTNEED)


def _chunks(idx: np.ndarray, size: int = CHUNK_ROWS):
    for lo in range(0, idx.shape[0], size):
        yield lo, idx[lo:lo + size]


def _running_sum(total: np.ndarray | None, block: np.ndarray) -> np.ndarray:
    """``total`` plus ``block``'s rows one after another: numpy reduces a C-ordered array
    along axis 0 row by row, so this is the whole array's ``sum(axis=0)``, bit for bit."""
    return np.add.reduce(block if total is None else np.vstack([total[None], block]), axis=0)


def column_stats(values: PooledObserved, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(np.nanmean, np.nanstd)`` over axis 0 of ``values[idx]``, a chunk of rows at a time
    (two passes), equal bit for bit to numpy's on the whole array."""
    width = values.n_features
    total, count = None, np.zeros(width, np.intp)
    for _, rows in _chunks(idx):
        x = values[rows]
        missing = np.isnan(x)
        count += np.sum(~missing, axis=0, dtype=np.intp)
        x[missing] = 0.0
        total = _running_sum(total, x)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.true_divide(np.zeros(width) if total is None else total, count)
        squares = None
        for _, rows in _chunks(idx):
            x = values[rows]
            missing = np.isnan(x)
            np.subtract(x, mean, out=x)
            x[missing] = 0.0
            np.multiply(x, x, out=x)
            squares = _running_sum(squares, x)
        var = np.true_divide(np.zeros(width) if squares is None else squares, count)
    return mean, np.sqrt(var)


def normalised(values: PooledObserved, idx: np.ndarray, mean: np.ndarray, std: np.ndarray,
               clip: float | None) -> np.ndarray:
    """``clip((values[idx] - mean) / std)`` as float32, a chunk of rows at a time."""
    out = np.empty((idx.shape[0], values.n_features), np.float32)
    for lo, rows in _chunks(idx):
        x = values[rows]
        x -= mean
        x /= std
        if clip is not None:
            np.clip(x, -clip, clip, out=x)
        out[lo:lo + rows.shape[0]] = x  # float64 -> float32, as astype rounds
    return out


#: a fold's normalised part larger than this is kept in a temporary file, not in memory
#: (``SpilledRows``): the last fold of a year trains on ~600k rows (~630 MB of float32), of
#: which a fixed budget of batches reads a sample
SPILL_BYTES = 256 * 2**20


class SpilledRows:
    """A fold's large normalised part, written once (a block of rows at a time, the same
    float32 values as ``normalised``) to an unlinked temporary file and read back through a
    read-only memory map: ``rows[k]`` copies the rows asked for and unmaps the pages read, so
    the part never sits in the process's memory, and reading a batch of windows is a gather
    from the page cache. ``blocks()`` yields the part in order, a block at a time (what the
    fold model and forecast keys hash: the same bytes, so the same keys)."""

    def __init__(self, values: PooledObserved, idx: np.ndarray, mean: np.ndarray,
                 std: np.ndarray, clip: float | None):
        idx = np.asarray(idx, np.int64)
        # unlinked from the start: nothing left behind; the map keeps the data until dropped
        with tempfile.TemporaryFile(prefix="foxhunt-fold-") as file:
            for _, rows in _chunks(idx):
                file.write(memoryview(normalised(values, rows, mean, std, clip)).cast("B"))
            file.flush()
            self._rows = np.memmap(file, dtype=np.float32, mode="r",
                                   shape=(int(idx.shape[0]), values.n_features))

    @property
    def shape(self) -> tuple[int, int]:
        return self._rows.shape

    @property
    def dtype(self) -> np.dtype:
        return self._rows.dtype

    @property
    def ndim(self) -> int:
        return 2

    @property
    def nbytes(self) -> int:
        return 0  # none of it in memory

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key) -> np.ndarray:
        out = self._rows[key]
        # a gather (the trainers' batches) is already a copy; a slice is a view of the map
        out = np.array(out) if np.may_share_memory(out, self._rows) else out.view(np.ndarray)
        _release(self._rows)
        return out

    def blocks(self) -> Iterator[np.ndarray]:
        for lo in range(0, len(self), CHUNK_ROWS):
            yield self[lo:lo + CHUNK_ROWS]

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        whole = self[:]
        return whole if dtype is None else whole.astype(dtype)


@dataclass
class RowPool:
    """Every stored row in (root, time) order; ``rows.observed`` reads the features back in
    raw units on demand (``PooledObserved``), never the whole history at once."""

    rows: SplitArrays
    dates: np.ndarray  # trade date of each row, as str
    meta: dict[str, Any]


def row_pool(data: TrainingData, dates_of: Callable[[np.ndarray], np.ndarray]) -> RowPool:
    """All splits of ``data`` as one row set; segment ids are made distinct per stored split,
    so no window spans the rows an embargo removed between them."""
    parts = [data.splits[s] for s in SPLITS if s in data.splits]
    if not parts:
        raise WalkForwardError("the dataset has no rows")
    seg_span = max(int(np.max(p.segment, initial=0)) for p in parts) + 1
    cat = {a: np.concatenate([np.asarray(getattr(p, a)) for p in parts])
           for a in ("known", "static", "targets", "ts_event", "root_index")}
    source = np.concatenate([np.full(p.n_rows, i, np.int64) for i, p in enumerate(parts)])
    within = np.concatenate([np.arange(p.n_rows, dtype=np.int64) for p in parts])
    segment = np.concatenate([np.asarray(p.segment, np.int64) + i * seg_span
                              for i, p in enumerate(parts)])
    order = np.lexsort((cat["ts_event"], cat["root_index"]))
    norm = data.meta.get("normalization") or {}
    scaled = "mean" in norm and "std" in norm
    observed = PooledObserved([p.observed for p in parts], source[order], within[order],
                              norm["mean"] if scaled else None, norm["std"] if scaled else None)
    rows = SplitArrays(observed=observed, segment=segment[order],  # type: ignore[arg-type]
                       window_starts=np.zeros(0, np.int64), **{k: v[order] for k, v in cat.items()})
    dates = np.asarray([str(d) for d in np.asarray(dates_of(rows.ts_event))])
    if dates.shape[0] != rows.n_rows:
        raise WalkForwardError(f"dates_of returned {dates.shape[0]} dates for {rows.n_rows} rows")
    return RowPool(rows=rows, dates=dates, meta=dict(data.meta))


_ROW_ARRAYS = ("known", "static", "targets", "ts_event", "segment", "root_index")


def _take(rows: SplitArrays, idx: np.ndarray,
          observed: np.ndarray | None = None) -> SplitArrays:
    """Rows ``idx`` of ``rows``; ``observed`` given: those rows' features, already made."""
    return SplitArrays(observed=rows.observed[idx] if observed is None else observed,
                       **{a: np.asarray(getattr(rows, a))[idx] for a in _ROW_ARRAYS},
                       window_starts=np.zeros(0, np.int64))


def _embargoed_rows(root: np.ndarray, embargo: int) -> np.ndarray:
    """Indices of rows (of roots ``root``) without the first ``embargo`` rows of each root."""
    root = np.asarray(root)
    keep = np.ones(root.size, dtype=bool)
    for r in np.unique(root):
        keep[np.flatnonzero(root == r)[:embargo]] = False
    return np.flatnonzero(keep)


def fold_data(pool: RowPool, fold: Fold, config: WalkForwardConfig) -> TrainingData:
    """The fold as a ``TrainingData`` (train / validation / test), normalised on its train part."""
    meta = pool.meta
    lookback, horizon = int(meta["lookback"]), int(meta["horizon"])
    embargo = config.embargo(lookback, horizon)
    picked: dict[str, np.ndarray] = {}
    root = np.asarray(pool.rows.root_index)
    for name, ds in (("train", fold.train_dates), ("validation", fold.validation_dates),
                     ("test", fold.test_dates)):
        idx = np.flatnonzero(np.isin(pool.dates, ds))
        if name != "train":
            idx = idx[_embargoed_rows(root[idx], embargo)]
        picked[name] = idx
    if picked["train"].shape[0] == 0:
        raise WalkForwardError(f"fold {fold.number}: no train rows on {fold.describe()['train']}")
    observed = pool.rows.observed
    mean, std = column_stats(observed, picked["train"])
    mean = np.nan_to_num(mean)
    std = np.where(np.isfinite(std) & (std > 1e-12), std, 1.0)
    clip = (meta.get("normalization") or {}).get("clip_sigma", 10.0)
    parts = {name: _take(pool.rows, idx, _fold_observed(observed, idx, mean, std, clip))
             for name, idx in picked.items()}
    split_meta = {}
    for name, part in parts.items():
        part.window_starts = valid_window_starts(np.asarray(part.segment), part.targets,
                                                 lookback, horizon)
        if part.n_windows == 0:
            dates = getattr(fold, f"{name}_dates")
            raise WalkForwardError(
                f"fold {fold.number}: {name} ({dates[0]} .. {dates[-1]}) has no complete window "
                f"of {lookback}+{horizon} bars after the {embargo}-bar embargo "
                f"({part.n_rows} rows)")
        split_meta[name] = {"rows": part.n_rows, "windows": part.n_windows,
                            "first_date": getattr(fold, f"{name}_dates")[0],
                            "last_date": getattr(fold, f"{name}_dates")[-1]}
    y1 = parts["train"].targets[:, 0].astype(np.float64)
    scale = float(np.nanstd(y1)) if np.isfinite(y1).any() else 0.0
    fold_meta = {**meta, "target_scale": scale if math.isfinite(scale) and scale > 0 else 1.0,
                 "normalization": {"mean": mean.tolist(), "std": std.tolist(), "clip_sigma": clip},
                 "embargo_bars": embargo, "splits": split_meta,
                 "fold": {"number": fold.number, **fold.describe()}}
    return TrainingData(meta=fold_meta, splits=parts)


def _fold_observed(values: PooledObserved, idx: np.ndarray, mean: np.ndarray,
                   std: np.ndarray, clip: float | None) -> np.ndarray | SpilledRows:
    """A fold part's normalised features: held when small, in a temporary file when large."""
    if idx.shape[0] * values.n_features * 4 > SPILL_BYTES:
        return SpilledRows(values, idx, mean, std, clip)
    return normalised(values, idx, mean, std, clip)


def dates_of_rows(pool: RowPool, ts: np.ndarray) -> np.ndarray:
    """The trade date (as in ``pool.dates``) of each timestamp in ``ts``."""
    uts, first = np.unique(np.asarray(pool.rows.ts_event), return_index=True)
    pos = np.clip(np.searchsorted(uts, np.asarray(ts)), 0, uts.size - 1)
    return pool.dates[first[pos]]


def dataset_version(pool: RowPool) -> str:
    """A content fingerprint of the rows (feature hash, timestamps, roots, outcomes): two
    pools with the same value hold the same bars and realised returns."""
    h = hashlib.sha256(str(pool.meta.get("feature_hash", "")).encode())
    for a in ("ts_event", "root_index", "targets"):
        h.update(np.ascontiguousarray(getattr(pool.rows, a)).tobytes())
    return h.hexdigest()[:16]
