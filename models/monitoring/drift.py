"""Drift of a day's inputs and outputs against a reference sample (the champion's training
dates): the population stability index and a two-sample test per feature.

Why both: the KS test alone flags everything on a day of ~1,400 autocorrelated minute bars
(its p-value assumes independent draws, so it rejects on shifts far too small to matter);
PSI alone has no notion of chance. A feature drifts when its PSI is past the threshold (an
effect that matters: 0.25 is the usual "significant shift") and its KS test rejects at
``alpha`` Bonferroni-adjusted over the features tested.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import chi2_contingency, ks_2samp

EPS = 1e-4  # floor of a bin's share, so an empty bin gives a finite PSI


@dataclass(frozen=True)
class DriftThresholds:
    psi: float = 0.25  # population stability index past which a distribution moved
    alpha: float = 0.01  # family-wise level of the two-sample tests (Bonferroni over features)
    min_drifted: int = 1  # features that must drift before the day warns
    bins: int = 10  # reference quantile bins of the PSI


@dataclass(frozen=True)
class FeatureDrift:
    name: str
    psi: float
    statistic: float  # KS distance (continuous) or chi-square (categorical)
    p_value: float
    drifted: bool


@dataclass(frozen=True)
class DriftReport:
    features: list[FeatureDrift] = field(default_factory=list)  # by PSI, largest first
    thresholds: DriftThresholds = field(default_factory=DriftThresholds)

    @property
    def drifted(self) -> list[FeatureDrift]:
        return [f for f in self.features if f.drifted]

    @property
    def warn(self) -> bool:
        return len(self.drifted) >= self.thresholds.min_drifted

    def top(self, n: int = 5) -> list[FeatureDrift]:
        """The most drifted features: those that drift first, then by PSI."""
        return sorted(self.features, key=lambda f: (not f.drifted, -f.psi))[:n]

    def describe(self, n: int = 5) -> str:
        if not self.features:
            return "no feature to compare"
        top = ", ".join(f"{f.name} (PSI {f.psi:.2f}, p {f.p_value:.1g})" for f in self.top(n))
        head = (f"{len(self.drifted)} of {len(self.features)} drifted (PSI > "
                f"{self.thresholds.psi:g} and two-sample p < {self.thresholds.alpha:g} / "
                f"{len(self.features)})")
        return f"{head}; most drifted: {top}"


def psi(reference: np.ndarray, current: np.ndarray, bins: int = 10) -> float:
    """Population stability index of ``current`` against ``reference`` over the reference's
    quantile bins: sum (c - r) * ln(c / r) of the bins' shares."""
    ref = np.asarray(reference, np.float64)
    cur = np.asarray(current, np.float64)
    ref, cur = ref[np.isfinite(ref)], cur[np.isfinite(cur)]
    if ref.size == 0 or cur.size == 0:
        return float("nan")
    edges = np.unique(np.quantile(ref, np.linspace(0, 1, bins + 1)[1:-1]))
    r = np.bincount(np.searchsorted(edges, ref, side="right"), minlength=edges.size + 1)
    c = np.bincount(np.searchsorted(edges, cur, side="right"), minlength=edges.size + 1)
    return _psi_of_counts(r, c)


def _psi_of_counts(r: np.ndarray, c: np.ndarray) -> float:
    rs = np.maximum(r / max(r.sum(), 1), EPS)
    cs = np.maximum(c / max(c.sum(), 1), EPS)
    return float(np.sum((cs - rs) * np.log(cs / rs)))


def categorical_drift(name: str, reference: np.ndarray, current: np.ndarray,
                      thresholds: DriftThresholds, n_tests: int = 1) -> FeatureDrift:
    """PSI and a chi-square test of two samples of labels (an agent's positions)."""
    labels = np.union1d(np.unique(reference), np.unique(current))
    r = np.array([(reference == v).sum() for v in labels])
    c = np.array([(current == v).sum() for v in labels])
    value = _psi_of_counts(r, c)
    if labels.size < 2:
        return FeatureDrift(name, value, 0.0, 1.0, False)
    stat, p, *_ = chi2_contingency(np.vstack([r, c]) + 0.5)
    return FeatureDrift(name, value, float(stat), float(p),
                        value > thresholds.psi and p < thresholds.alpha / max(n_tests, 1))


def feature_drift(reference: Mapping[str, np.ndarray], current: Mapping[str, np.ndarray],
                  thresholds: DriftThresholds | None = None) -> DriftReport:
    """Per feature present in both (and not constant in the reference): PSI and the KS
    two-sample test of the current values against the reference's."""
    th = thresholds or DriftThresholds()
    names = [n for n in reference if n in current and np.ptp(_finite(reference[n])) > 0]
    out = []
    for n in names:
        ref, cur = _finite(reference[n]), _finite(current[n])
        if ref.size < 2 or cur.size < 2:
            continue
        test = ks_2samp(ref, cur)
        value = psi(ref, cur, th.bins)
        out.append(FeatureDrift(n, value, float(test.statistic), float(test.pvalue),
                                value > th.psi and test.pvalue < th.alpha / len(names)))
    return DriftReport(sorted(out, key=lambda f: -f.psi), th)


def _finite(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x[np.isfinite(x)]


__all__ = ["DriftReport", "DriftThresholds", "FeatureDrift", "categorical_drift",
           "feature_drift", "psi"]
