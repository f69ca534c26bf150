"""Paired comparison of candidates on the same test bars: Sharpe differences with block
bootstrap CIs, and a Model Confidence Set.

Why paired: two models scored on the same bars share the market's noise, so the difference
of their Sharpe ratios is far better determined than either Sharpe alone; comparing one
model's CI lower bound with another's point Sharpe (the old rule) could only promote a model
near the oracle. Every difference is computed on the *same* resamples (common random
numbers), so the whole table is one bootstrap.

The resampling is ``arch``'s stationary bootstrap (Politis & Romano) with the block length
chosen from the data (``arch.bootstrap.optimal_block_length``, Politis & White 2004): the
largest of the candidates' optimal lengths, so the dependence of the most persistent P&L
series is kept. The Model Confidence Set is ``arch.bootstrap.MCS`` (Hansen, Lunde & Nason
2011) on per-bar losses = minus the net P&L, with the same block length.

Bars are stacked root by root in time order (as the walk-forward pools them), so the Sharpe
here is the leaderboard's pooled Sharpe (``models.sharpe.sharpe_ratio``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from arch.bootstrap import MCS, StationaryBootstrap, optimal_block_length
from threadpoolctl import threadpool_limits

from models.sharpe import sharpe_ratio

#: size of the Model Confidence Set's test: the set holds the best model with 90% confidence
MCS_SIZE = 0.10


class PairedComparisonError(ValueError):
    """The candidates' bars cannot be compared (different bars, too few, none)."""


@dataclass(frozen=True)
class SharpeDifference:
    """Sharpe(``model``) - Sharpe(``other``) on the same bars, with its bootstrap CI."""

    model: str
    other: str
    diff: float
    low: float
    high: float
    level: float

    @property
    def significant(self) -> bool:
        """The CI lies above 0: ``model`` beats ``other`` (one-sided at (1 - level) / 2)."""
        return math.isfinite(self.low) and self.low > 0

    def describe(self) -> str:
        return f"{self.diff:+.3g} [{self.low:+.3g}, {self.high:+.3g}]"


@dataclass(frozen=True)
class PairedComparison:
    """Every candidate's Sharpe on the same bootstrap resamples, and the MCS."""

    names: tuple[str, ...]
    sharpe: dict[str, float]  # point Sharpe; 0 for a series that never moves (flat)
    boot: np.ndarray = field(repr=False)  # [resamples, len(names)] Sharpe per resample
    block_length: float
    level: float  # two-sided level of every difference's CI
    mcs_included: frozenset[str]
    mcs_pvalues: dict[str, float]
    n_bars: int

    def diff(self, model: str, other: str, level: float | None = None) -> SharpeDifference:
        """The paired difference of ``model`` over ``other`` (percentile CI at ``level``,
        default the comparison's)."""
        lv = self.level if level is None else float(level)
        i, j = self.names.index(model), self.names.index(other)
        d = self.boot[:, i] - self.boot[:, j]
        d = d[np.isfinite(d)]
        point = self.sharpe[model] - self.sharpe[other]
        if d.size < 2:
            return SharpeDifference(model, other, point, math.nan, math.nan, lv)
        lo, hi = np.quantile(d, [(1 - lv) / 2, (1 + lv) / 2])
        return SharpeDifference(model, other, point, float(lo), float(hi), lv)

    def in_mcs(self, name: str) -> bool:
        return name in self.mcs_included


def _resampled_sharpes(x: np.ndarray, resamples: Iterable[np.ndarray], bars_per_year: float
                       ) -> np.ndarray:
    """``[resamples, k]``: the Sharpe of each column of ``x[idx]`` for each resample's
    indices, from how often each bar is drawn (two matrix-vector products of the bar counts)
    instead of gathering ``x[idx]``: a year's pooled bars (~234k x 9 candidates) cost ~50 ms
    a resample gathered, 1,000 resamples most of a minute of the leaderboard (issue 41). The
    columns are centred on their means first, so the sums lose nothing to cancellation
    (~1e-12 relative to the gathered moments); a column without variation on a resample is
    flat (Sharpe 0)."""
    n = x.shape[0]
    centre = x.mean(axis=0)
    xc = x - centre
    xc2 = xc * xc
    scale = np.maximum(np.abs(x).max(axis=0), 1e-300)
    out = []
    for idx in resamples:
        counts = np.bincount(idx, minlength=n).astype(np.float64)
        m = counts @ xc / n
        var = np.maximum(counts @ xc2 / n - m * m, 0.0) * (n / (n - 1))
        sd = np.sqrt(var)
        flat = sd <= 1e-12 * scale
        with np.errstate(divide="ignore", invalid="ignore"):
            out.append(np.where(flat, 0.0, (m + centre) / np.where(flat, 1.0, sd)
                                * math.sqrt(bars_per_year)))
    return np.stack(out)


def block_length(pnl: np.ndarray) -> float:
    """The stationary bootstrap's block length for ``[n, k]`` P&L: the largest of the
    columns' Politis-White optimal lengths (constant columns have none), at least 1 and at
    most n / 4.

    One BLAS thread: arch's estimate is ~3 sqrt(n) dot products of n bars per column, and
    OpenBLAS splitting each small product over its threads cost ~150x the product itself
    (236k bars on 2 busy cores: 11.4 s a column, 0.08 s on one thread)."""
    n = pnl.shape[0]
    lengths = []
    with threadpool_limits(limits=1, user_api="blas"):
        for j in range(pnl.shape[1]):
            col = pnl[:, j]
            if np.ptp(col) <= 0:
                continue
            b = float(optimal_block_length(col)["stationary"].iloc[0])
            if math.isfinite(b):
                lengths.append(b)
    return float(min(max([1.0, *lengths]), max(n / 4, 1.0)))


def compare(pnl: Mapping[str, np.ndarray], bars_per_year: float, *, level: float,
            resamples: int = 1000, seed: int = 0, mcs_size: float = MCS_SIZE
            ) -> PairedComparison:
    """Paired Sharpe differences and the MCS of ``pnl`` (name -> per-bar net log return, all
    on the same bars in the same order)."""
    names = tuple(pnl)
    if len(names) < 1:
        raise PairedComparisonError("nothing to compare")
    x = np.column_stack([np.asarray(pnl[n], np.float64) for n in names])
    if x.shape[0] < 10:
        raise PairedComparisonError(f"{x.shape[0]} bars are too few for a bootstrap")
    if not np.isfinite(x).all():
        bad = [n for n, col in zip(names, x.T, strict=True) if not np.isfinite(col).all()]
        raise PairedComparisonError(f"non-finite P&L in {bad}")
    b = block_length(x)
    point = {n: _point_sharpe(x[:, j], bars_per_year) for j, n in enumerate(names)}
    rng = np.random.default_rng(seed)
    bs = StationaryBootstrap(b, np.arange(x.shape[0]), seed=rng)
    boot = _resampled_sharpes(x, (idx for (idx,), _ in bs.bootstrap(resamples)), bars_per_year)
    included, pvalues = _mcs(x, names, b, resamples, rng, mcs_size)
    return PairedComparison(names, point, boot, b, float(level), included, pvalues, x.shape[0])


def _point_sharpe(col: np.ndarray, bars_per_year: float) -> float:
    s = sharpe_ratio(col, bars_per_year)
    return s if math.isfinite(s) else 0.0


class _NotKept(list):
    """Drops what is appended. arch's MCS keeps every resample's indices "for testing"
    (``MCS._bootstrap_indices``): resamples x bars integers, 1.9 GB for a year's 236k pooled
    bars, all held until it returns; nothing in ``compute`` reads them back."""

    def append(self, item: object) -> None:
        pass


def _mcs(x: np.ndarray, names: Sequence[str], block: float, resamples: int,
         rng: np.random.Generator, size: float) -> tuple[frozenset[str], dict[str, float]]:
    """arch's MCS (range statistic) on losses = -P&L. Candidates with identical P&L (an
    ensemble that is its member, two models that never trade) enter once, as the first of
    them, and share its verdict: their loss difference has no variance to test."""
    first: dict[int, int] = {}
    for j in range(len(names)):
        first[j] = next((i for i in range(j) if first[i] == i
                         and np.array_equal(x[:, i], x[:, j])), j)
    unique = [j for j in range(len(names)) if first[j] == j]
    if len(unique) == 1:
        return frozenset(names), dict.fromkeys(names, 1.0)
    losses = pd.DataFrame(-x[:, unique], columns=[names[j] for j in unique])
    mcs = MCS(losses, size=size, reps=resamples, block_size=max(int(round(block)), 1),
              method="R", bootstrap="stationary", seed=rng)
    mcs._bootstrap_indices = _NotKept()
    mcs.compute()
    p_unique = {str(k): float(v) for k, v in mcs.pvalues["Pvalue"].items()}
    kept = {str(n) for n in mcs.included}
    pvalues = {n: p_unique[names[first[j]]] for j, n in enumerate(names)}
    return frozenset(n for j, n in enumerate(names) if names[first[j]] in kept), pvalues


@dataclass(frozen=True)
class Bars:
    """One candidate's pooled test bars: which bar (root, ts_event in ns) and its net P&L."""

    root: np.ndarray
    ts: np.ndarray
    pnl: np.ndarray

    def ordered(self) -> Bars:
        order = np.lexsort((np.asarray(self.ts, np.int64), np.asarray(self.root, str)))
        return Bars(np.asarray(self.root, str)[order], np.asarray(self.ts, np.int64)[order],
                    np.asarray(self.pnl, np.float64)[order])


def aligned_pnl(bars: Mapping[str, Bars]) -> dict[str, np.ndarray]:
    """Each candidate's P&L in one (root, time) order; every candidate must have been scored
    on exactly the same bars (one protocol), else the comparison is refused, naming it."""
    if not bars:
        raise PairedComparisonError("no candidate bars")
    ordered = {n: b.ordered() for n, b in bars.items()}
    first_name, first = next(iter(ordered.items()))
    for name, b in ordered.items():
        if b.ts.shape != first.ts.shape or not (np.array_equal(b.ts, first.ts)
                                                and np.array_equal(b.root, first.root)):
            raise PairedComparisonError(
                f"{name} was scored on other bars than {first_name} ({b.ts.size} vs "
                f"{first.ts.size}): not the same protocol")
    return {n: b.pnl for n, b in ordered.items()}


def family_wise_level(n_tests: int, alpha: float) -> float:
    """Two-sided CI level whose lower bounds make ``n_tests`` one-sided tests at family-wise
    ``alpha`` (Bonferroni: each lower tail holds alpha / n_tests)."""
    return 1.0 - 2.0 * alpha / max(int(n_tests), 1)
