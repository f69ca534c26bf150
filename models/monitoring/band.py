"""What the walk-forward predicts for N live days: the 5th-95th percentile band of the
Sharpe ratio and of the cumulative net log return over that many bars, drawn by block
bootstrap of the champion's own walk-forward test bars.

Each root's test P&L (in time order) is resampled with arch's stationary bootstrap (block
length chosen from the data, Politis-White, as the leaderboard's paired tests) into paths as
long as that root's live bars; the band at live day d is the spread over paths of the metric
of each path's first n_r(d) bars (n_r(d): the root's live bars up to day d), the roots
pooled as the live book pools them. A live curve outside it is unlikely under the backtest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from arch.bootstrap import StationaryBootstrap

from models.evaluation.paired import block_length

QUANTILES = (0.05, 0.5, 0.95)


def series_block(pnl: np.ndarray) -> float:
    """The stationary bootstrap's mean block length for one P&L series (Politis-White, as
    the leaderboard's paired tests; it costs about a second per 10,000 bars: compute once)."""
    x = np.asarray(pnl, np.float64)
    x = x[np.isfinite(x)]
    return block_length(x[:, None]) if x.size >= 2 else 1.0


def resample_paths(pnl: np.ndarray, length: int, resamples: int,
                   rng: np.random.Generator, block: float | None = None) -> np.ndarray:
    """``[resamples, length]`` stationary-bootstrap paths of ``pnl`` (several resamples end
    to end when ``length`` exceeds the data); ``block``: its ``series_block`` if known."""
    x = np.asarray(pnl, np.float64)
    x = x[np.isfinite(x)]
    if x.size < 2 or length <= 0:
        return np.zeros((resamples, max(length, 0)))
    block = series_block(x) if block is None else block
    reps = math.ceil(length / x.size)
    bs = StationaryBootstrap(block, np.arange(x.size), seed=rng)
    idx = np.stack([i for (i,), _ in bs.bootstrap(resamples * reps)])
    return x[idx.reshape(resamples, reps * x.size)[:, :length]]


@dataclass(frozen=True)
class Band:
    """Per live day (cumulative since the live start): the bars counted and the band's
    quantiles (``QUANTILES``) of the Sharpe ratio and of the cumulative net log return."""

    days: list[str]
    bars: np.ndarray  # [days]
    sharpe: np.ndarray  # [days, 3]
    equity: np.ndarray  # [days, 3]


def rolling_band(test_pnl: Mapping[str, np.ndarray], live_bars: Mapping[str, Sequence[int]],
                 days: Sequence[str], bars_per_year: float, *, resamples: int = 500,
                 seed: int = 0) -> Band:
    """The band per live day of the pooled book: ``live_bars[root][d]`` is the root's live
    bar count up to and including day ``d`` (cumulative); roots without test bars are left
    out (nothing to compare them with)."""
    rng = np.random.default_rng(seed)
    n_days = len(days)
    s1 = np.zeros((resamples, n_days))
    s2 = np.zeros((resamples, n_days))
    count = np.zeros(n_days)
    for root, counts in live_bars.items():
        if root not in test_pnl:
            continue
        counts = np.asarray(counts, np.int64)
        total = int(counts[-1]) if counts.size else 0
        if total == 0:
            continue
        paths = resample_paths(test_pnl[root], total, resamples, rng)
        c1 = np.concatenate([np.zeros((resamples, 1)), np.cumsum(paths, axis=1)], axis=1)
        c2 = np.concatenate([np.zeros((resamples, 1)), np.cumsum(paths**2, axis=1)], axis=1)
        s1 += c1[:, counts]
        s2 += c2[:, counts]
        count += counts
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = s1 / count
        var = (s2 - count * mean**2) / (count - 1)
        sharpe = np.where(var > 0, mean / np.sqrt(var) * math.sqrt(bars_per_year), np.nan)
    q = np.asarray(QUANTILES)
    return Band(list(days), count,
                np.nanquantile(sharpe, q, axis=0).T if n_days else np.zeros((0, 3)),
                np.quantile(s1, q, axis=0).T if n_days else np.zeros((0, 3)))


__all__ = ["QUANTILES", "Band", "resample_paths", "rolling_band", "series_block"]
