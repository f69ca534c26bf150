"""The walk-forward's observed features, read on demand and normalised a chunk at a time.

Why: the row pool used to hold every stored row's observed features in raw units as float64
(a year of two roots: ~690k rows x 261 features = 1.4 GB), and each fold then copied its
train part again for its normalisation (another 0.9 GB, plus ``np.nanstd``'s temporaries of
the same size): a year peaked at several GB for a fold that trains on a fixed budget of
batches (issue 41). Here the pool keeps the dataset's own float32 (memory-mapped) splits and
an index; a fold's statistics and its normalised float32 parts are computed a block of rows
at a time, with the same float64 operations in the same order as before, so the values are
bit for bit those of the whole-array code (``tests/models/evaluation/test_pooled_observed``).
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Sequence

import numpy as np

#: rows converted to float64 at a time (~130 MB for 261 features)
CHUNK_ROWS = 65_536


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
            out = out * self.std + self.mean
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
        x = (values[rows] - mean) / std
        if clip is not None:
            x = np.clip(x, -clip, clip)
        out[lo:lo + rows.shape[0]] = x.astype(np.float32)
    return out
