"""A sequential detector of decay: has the champion's live P&L fallen below what its
walk-forward test bars earned? A one-sided CUSUM (Page 1954) against the backtest.

Each live bar's net P&L is standardised with its root's backtest mean and sd,
``z = (pnl - mean) / sd``; with ``delta = mean / sd`` (the backtest's edge per bar, in sd
units) the statistic is

    S_t = max(0, S_{t-1} - z_t - k),   k = k_fraction * delta,

and the check fails when ``S_t`` passes a threshold h. Under the backtest (z has mean 0) S
drifts down by k per bar and stays near 0; when the edge is gone (mean P&L 0, or the cost of
trading noise) it climbs by about ``delta - k`` per bar. ``k = delta / 2`` is the CUSUM that
detects a drop of the whole edge fastest for a given false-alarm rate. Roots whose backtest
earned nothing have no edge to lose and are left out.

h is calibrated per champion, not fixed: it is the ``1 - false_alarm`` quantile of the
CUSUM's maximum over ``horizon_days`` of live streams drawn from the champion's own test bars
(stationary block bootstrap), so the check fails by chance on ``false_alarm`` of such periods
whatever the model's edge, fat tails and autocorrelation (a fixed h would mean a false-alarm
rate that changes with every champion).

Why not Page-Hinkley (``river.drift.PageHinkley``): it compares each value with the running
mean of the stream itself, so it finds a change *inside* the live period but not a live
period that is worse than the backtest from its first bar, which is exactly the case of a
regime change before the champion went live. The reference here is the backtest's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DecayThresholds:
    k_fraction: float = 0.5  # the allowance k as a share of the backtest edge per bar
    false_alarm: float = 0.05  # chance of failing over horizon_days when nothing decayed
    horizon_days: int = 20  # live trade dates the false-alarm rate is counted over
    min_bars: int = 100  # live bars before the check may fail
    threshold: float | None = None  # a fixed CUSUM level instead of the calibrated one


@dataclass(frozen=True)
class Reference:
    """The backtest's P&L per bar of one root: what live bars are standardised with."""

    mean: float
    sd: float

    @property
    def delta(self) -> float:
        return self.mean / self.sd if self.sd > 0 else 0.0


def references(pnl_by_root: Mapping[str, np.ndarray]) -> dict[str, Reference]:
    """Each root's backtest mean and sd (ddof 1) of its per-bar net P&L."""
    out = {}
    for root, pnl in pnl_by_root.items():
        x = np.asarray(pnl, np.float64)
        x = x[np.isfinite(x)]
        if x.size > 1:
            out[root] = Reference(float(x.mean()), float(x.std(ddof=1)))
    return out


@dataclass(frozen=True)
class DecayResult:
    statistic: np.ndarray  # S_t after each live bar used
    threshold: float
    bars: int  # live bars used (roots with an edge, finite P&L)
    first_alarm: int | None  # index into the bars used, None: no alarm

    @property
    def alarm(self) -> bool:
        return self.first_alarm is not None

    @property
    def peak(self) -> float:
        return float(self.statistic.max()) if self.statistic.size else 0.0

    @property
    def last(self) -> float:
        return float(self.statistic[-1]) if self.statistic.size else 0.0


def _per_bar(roots: np.ndarray, refs: Mapping[str, Reference]) -> tuple[np.ndarray, ...]:
    """Each bar's reference mean, sd and edge (NaN / 0 where its root has no reference)."""
    roots = np.asarray(roots).astype(str)
    names, inverse = np.unique(roots, return_inverse=True)
    mean = np.array([refs[r].mean if r in refs else np.nan for r in names])[inverse]
    sd = np.array([refs[r].sd if r in refs else np.nan for r in names])[inverse]
    delta = np.divide(mean, sd, out=np.zeros_like(mean), where=sd > 0)
    return mean, sd, delta


def increments(pnl: np.ndarray, roots: np.ndarray, refs: Mapping[str, Reference],
               k_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """The CUSUM's steps ``-z - k`` of the bars (in time order; ``pnl`` may hold several
    streams as rows) whose root has an edge, and the mask of those bars."""
    pnl = np.asarray(pnl, np.float64)
    mean, sd, delta = _per_bar(roots, refs)
    use = np.isfinite(mean) & (sd > 0) & (delta > 0)
    if pnl.ndim == 1:
        use = use & np.isfinite(pnl)
    z = (pnl[..., use] - mean[use]) / sd[use]
    return -z - k_fraction * delta[use], use


def cusum(steps: np.ndarray) -> np.ndarray:
    """``S_t = max(0, S_{t-1} + step_t)`` from ``S_0 = 0`` along the last axis, vectorised:
    the cumulative sum less its running minimum (0 included)."""
    c = np.cumsum(steps, axis=-1)
    floor = np.minimum.accumulate(np.minimum(c, 0.0), axis=-1)
    return c - floor


def detect(pnl: np.ndarray, roots: np.ndarray, refs: Mapping[str, Reference],
           threshold: float, thresholds: DecayThresholds | None = None) -> DecayResult:
    """The CUSUM over live bars (``pnl`` and ``roots`` in time order) against ``threshold``."""
    th = thresholds or DecayThresholds()
    steps, _ = increments(pnl, roots, refs, th.k_fraction)
    s = cusum(steps)
    past = np.flatnonzero(s > threshold)
    past = past[past >= th.min_bars - 1]
    return DecayResult(s, float(threshold), int(s.size), int(past[0]) if past.size else None)


def interleave(counts: Mapping[str, int]) -> np.ndarray:
    """A stream of root names, each root ``counts[root]`` times, spread evenly (as minute
    bars of several roots alternate in time)."""
    names = [r for r, n in counts.items() for _ in range(int(n))]
    where = [(i + 0.5) / int(n) for r, n in counts.items() for i in range(int(n))]
    return np.asarray(names)[np.argsort(where, kind="stable")] if names else np.zeros(0, str)


def calibrate(test_pnl: Mapping[str, np.ndarray], bars_per_day: Mapping[str, int],
              refs: Mapping[str, Reference], thresholds: DecayThresholds | None = None,
              resamples: int = 400, seed: int = 0, chunk: int = 50) -> float:
    """h: the ``1 - false_alarm`` quantile of the CUSUM's maximum over ``horizon_days`` of
    in-control live streams (``bars_per_day`` per root, drawn from the test bars)."""
    th = thresholds or DecayThresholds()
    if th.threshold is not None:
        return float(th.threshold)
    stream = interleave({r: n * th.horizon_days for r, n in bars_per_day.items()
                         if r in refs and refs[r].delta > 0})
    if stream.size == 0:
        return float("inf")
    from models.monitoring.band import series_block

    rng = np.random.default_rng(seed)
    blocks = {r: series_block(test_pnl[r]) for r in np.unique(stream)}
    peaks = []
    for start in range(0, resamples, chunk):
        n = min(chunk, resamples - start)
        steps = in_control_steps(test_pnl, stream, refs, th.k_fraction, n, rng, blocks)
        peaks.append(cusum(steps).max(axis=-1))
    return float(np.quantile(np.concatenate(peaks), 1.0 - th.false_alarm))


def in_control_steps(test_pnl: Mapping[str, np.ndarray], stream_roots: np.ndarray,
                     refs: Mapping[str, Reference], k_fraction: float, resamples: int,
                     rng: np.random.Generator,
                     blocks: Mapping[str, float] | None = None) -> np.ndarray:
    """``[resamples, bars]`` CUSUM steps of live streams drawn from the backtest itself: each
    root's bars of ``stream_roots`` (the live stream's roots in time order) filled with a
    block-bootstrap path of that root's test P&L (``blocks``: each root's block length, if
    known). What the detector sees when nothing decayed, so its false-alarm rate over a live
    period of this length can be counted."""
    from models.monitoring.band import resample_paths

    roots = np.asarray(stream_roots).astype(str)
    pnl = np.zeros((resamples, roots.size))
    for r in np.unique(roots):
        where = np.flatnonzero(roots == r)
        if r in test_pnl:
            pnl[:, where] = resample_paths(test_pnl[r], where.size, resamples, rng,
                                           None if blocks is None else blocks.get(r))
    return increments(pnl, roots, refs, k_fraction)[0]


def false_alarm_rate(steps_in_control: np.ndarray, threshold: float) -> float:
    """Share of in-control step paths (``[paths, bars]``, e.g. block-bootstrap resamples of
    the backtest's own bars) whose CUSUM passes ``threshold``."""
    if steps_in_control.size == 0:
        return float("nan")
    return float((cusum(steps_in_control).max(axis=-1) > threshold).mean())


__all__ = ["DecayResult", "DecayThresholds", "Reference", "calibrate", "cusum", "detect",
           "false_alarm_rate", "in_control_steps", "increments", "interleave", "references"]
