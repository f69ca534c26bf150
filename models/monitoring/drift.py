"""Drift of a day's inputs and outputs against reference days (the champion's training dates):
the population stability index and the Kolmogorov-Smirnov two-sample statistic per feature,
judged against how much the reference days differ from each other.

Why not fixed cut-offs: minute features are autocorrelated and volatility clusters over
days, so a single day always differs from a multi-day sample (the KS p-value assumes
independent draws and rejects nearly everything; PSI past the usual 0.25 was the rule for
most volatility features on most days of the generator's data). So each reference day is
scored against the other reference days (leave one day out). A feature's score on a day is
how far past the largest of the other reference days it is, in both PSI and KS distance
(the smaller of the two ratios); it drifts when its score passes 1 and its PSI the floor. The
day warns when its largest score passes the largest any reference day had against the
others: with n exchangeable days that happens by chance at most 1 / (n + 1) of the time,
about 5% per day for 20 reference days, and one feature that moved far is enough. Features
that move with time (days to expiry, bars in the contract: a monotone trend over the
reference days) are left out: a new day differs from them by construction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import ks_2samp, spearmanr

EPS = 1e-4  # floor of a bin's share, so an empty bin gives a finite PSI
Sample = Mapping[str, np.ndarray]  # feature -> values


@dataclass(frozen=True)
class DriftThresholds:
    psi: float = 0.1  # a drifted feature's PSI must also pass this floor (small shifts)
    trend: float = 0.9  # |Spearman| of day median vs day index past which a feature moves
    bins: int = 10  # reference quantile bins of the PSI


@dataclass(frozen=True)
class FeatureDrift:
    name: str
    psi: float
    statistic: float  # KS distance
    p_value: float
    drifted: bool
    score: float = 0.0  # min(PSI, KS) as a multiple of the largest on another reference day


@dataclass(frozen=True)
class DriftReport:
    features: list[FeatureDrift] = field(default_factory=list)  # by PSI, largest first
    thresholds: DriftThresholds = field(default_factory=DriftThresholds)
    usual: float = 1.0  # the largest score any reference day had against the others
    moving: tuple[str, ...] = ()  # features left out: they trend with time

    @property
    def drifted(self) -> list[FeatureDrift]:
        return [f for f in self.features if f.drifted]

    @property
    def score(self) -> float:
        return max((f.score for f in self.drifted), default=0.0)

    @property
    def warn(self) -> bool:
        return bool(self.drifted) and self.score > self.usual

    def top(self, n: int = 5) -> list[FeatureDrift]:
        """The most drifted features, by score."""
        return sorted(self.features, key=lambda f: -f.score)[:n]

    def describe(self, n: int = 5) -> str:
        if not self.features:
            return "no feature to compare"
        top = ", ".join(f"{f.name} ({f.score:.2f}x; PSI {f.psi:.2f}, KS {f.statistic:.2f})"
                        for f in self.top(n))
        left = f"; {len(self.moving)} trending with time left out" if self.moving else ""
        return (f"{len(self.drifted)} of {len(self.features)} features past every reference "
                f"day, the furthest {self.score:.2f}x (a reference day at most "
                f"{self.usual:.2f}x){left}; most drifted: {top}")


def _edges(ref: np.ndarray, bins: int) -> np.ndarray:
    """Bin edges at the reference's quantiles, each moved to the middle of the gap to the next
    value the reference takes: a discrete feature (a return of whole ticks) puts each of its
    values in one bin, and the same tick at a slightly different price level stays there."""
    values = np.unique(ref)
    q = np.unique(np.quantile(ref, np.linspace(0, 1, bins + 1)[1:-1]))
    at = np.searchsorted(values, q, side="right")
    keep = at < values.size
    return np.unique(0.5 * (q[keep] + values[at[keep]]))


def _psi_of_counts(r: np.ndarray, c: np.ndarray) -> float:
    rs = np.maximum(r / max(r.sum(), 1), EPS)
    cs = np.maximum(c / max(c.sum(), 1), EPS)
    return float(np.sum((cs - rs) * np.log(cs / rs)))


def psi(reference: np.ndarray, current: np.ndarray, bins: int = 10) -> float:
    """Population stability index of ``current`` against ``reference`` over the reference's
    quantile bins: sum (c - r) * ln(c / r) of the bins' shares."""
    ref, cur = _finite(reference), _finite(current)
    if ref.size == 0 or cur.size == 0:
        return float("nan")
    edges = _edges(ref, bins)
    r = np.bincount(np.searchsorted(edges, ref, side="right"), minlength=edges.size + 1)
    c = np.bincount(np.searchsorted(edges, cur, side="right"), minlength=edges.size + 1)
    return _psi_of_counts(r, c)


def _finite(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x[np.isfinite(x)]


def _scores(ref: np.ndarray, cur: np.ndarray, bins: int) -> tuple[float, float, float]:
    test = ks_2samp(ref, cur)
    return psi(ref, cur, bins), float(test.statistic), float(test.pvalue)


@dataclass(frozen=True)
class ReferenceNull:
    """How much each reference day differs from the other reference days, per feature
    (PSI and KS, leave one day out), and how many features drifted on each: what a new day
    is judged against. Computed once per reference."""

    features: tuple[str, ...]
    psi: np.ndarray  # [features, days]
    ks: np.ndarray  # [features, days]
    moving: tuple[str, ...]

    def day_scores(self) -> np.ndarray:
        """Per reference day, the largest score of its features against the other days."""
        n = self.psi.shape[1]
        if n < 2 or self.psi.shape[0] == 0:
            return np.zeros(n)
        out = []
        for i in range(n):
            rest = np.delete(np.arange(n), i)
            out.append(float(_score(self.psi[:, i], self.ks[:, i], self.psi[:, rest].max(axis=1),
                                    self.ks[:, rest].max(axis=1)).max()))
        return np.asarray(out)


def _score(psi_: np.ndarray, ks: np.ndarray, psi_max: np.ndarray, ks_max: np.ndarray
           ) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(psi_max > 0, psi_ / psi_max, np.inf)
        b = np.where(ks_max > 0, ks / ks_max, np.inf)
    return np.minimum(a, b)


def reference_null(days: Mapping[str, Sample], thresholds: DriftThresholds | None = None
                   ) -> ReferenceNull:
    """``days``: reference day -> feature -> values (in day order)."""
    th = thresholds or DriftThresholds()
    keys = list(days)
    names = [n for n in (next(iter(days.values())) if days else {})
             if all(n in days[k] for k in keys)]
    moving = []
    for n in names:
        medians = [np.median(_finite(days[k][n])) if _finite(days[k][n]).size else np.nan
                   for k in keys]
        ok = np.isfinite(medians)
        if ok.sum() >= 3 and np.ptp(np.asarray(medians)[ok]) > 0:
            rho = spearmanr(np.arange(len(keys))[ok], np.asarray(medians)[ok]).statistic
            if abs(rho) >= th.trend:
                moving.append(n)
    kept = [n for n in names if n not in moving
            and np.ptp(np.concatenate([_finite(days[k][n]) for k in keys])) > 0]
    p = np.zeros((len(kept), len(keys)))
    k = np.zeros((len(kept), len(keys)))
    for i, n in enumerate(kept):
        p[i], k[i] = _leave_one_day_out([_finite(days[d][n]) for d in keys], th.bins)
    return ReferenceNull(tuple(kept), p, k, tuple(moving))


def _leave_one_day_out(parts: list[np.ndarray], bins: int) -> tuple[np.ndarray, np.ndarray]:
    """PSI and KS distance of each day's values against the other days' pooled, all days at
    once: bin counts (over the pooled days' bins) and empirical CDFs at every distinct value
    (ties exact) per day, the rest being the total less the day."""
    values = np.concatenate(parts)
    day = np.repeat(np.arange(len(parts)), [x.size for x in parts])
    n_days = len(parts)
    edges = _edges(values, bins)
    b = np.searchsorted(edges, values, side="right")
    counts = np.bincount(day * (edges.size + 1) + b,
                         minlength=n_days * (edges.size + 1)).reshape(n_days, -1)
    total = counts.sum(axis=0)
    psi_ = np.array([_psi_of_counts(total - counts[d], counts[d]) for d in range(n_days)])
    uniq, at = np.unique(values, return_inverse=True)
    per = np.bincount(day * uniq.size + at, minlength=n_days * uniq.size).reshape(n_days, -1)
    cdf = np.cumsum(per, axis=1)
    whole = cdf.sum(axis=0)
    n = cdf[:, -1:].astype(np.float64)
    rest_n = whole[-1] - n
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = np.abs(cdf / n - (whole - cdf) / rest_n)
    ks = np.where((n[:, 0] > 0) & (rest_n[:, 0] > 0), np.nanmax(gap, axis=1), 0.0)
    return psi_, ks


def feature_drift(days: Mapping[str, Sample], current: Sample, null: ReferenceNull,
                  thresholds: DriftThresholds | None = None) -> DriftReport:
    """Each feature of ``current`` against all reference ``days`` pooled: PSI and the KS test,
    scored against the largest any reference day had (``null``)."""
    th = thresholds or DriftThresholds()
    out = []
    for i, n in enumerate(null.features):
        if n not in current or _finite(current[n]).size < 2:
            continue
        ref = np.concatenate([_finite(days[d][n]) for d in days])
        value, stat, p = _scores(ref, _finite(current[n]), th.bins)
        worst_psi = null.psi[i].max() if null.psi.shape[1] else 0.0
        worst_ks = null.ks[i].max() if null.ks.shape[1] else 0.0
        score = float(_score(np.array([value]), np.array([stat]), np.array([worst_psi]),
                             np.array([worst_ks]))[0])
        out.append(FeatureDrift(n, value, stat, p, score > 1.0 and value > th.psi, score))
    scores = null.day_scores()
    return DriftReport(sorted(out, key=lambda f: -f.score), th,
                       max(1.0, float(scores.max())) if scores.size else 1.0, null.moving)


__all__ = ["DriftReport", "DriftThresholds", "FeatureDrift", "ReferenceNull", "feature_drift",
           "psi", "reference_null"]
