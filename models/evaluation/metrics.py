"""Forecast and trading metrics: arrays in, floats and small tables out.

Quantile forecasts are arrays ``[W, H, Q]`` against outcomes ``[W, H]`` in the same units
(the ratios below are scale-free, so raw log returns or target-scaled values both work).
Confidence intervals use a *circular block bootstrap* (Politis & Romano 1992): bar
returns and hit series are autocorrelated, so resampling single bars would understate
the width. Intervals are percentile intervals at ``level``; every draw is seeded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from models.quantile import pinball_loss, pinball_terms
from models.sharpe import sharpe_ratio

#: One-minute bars in a year of 23-hour futures sessions (252 x 1380): the default where a
#: dataset does not say its own ``bars_per_year``.
DEFAULT_BARS_PER_YEAR: float = 252 * 1380

#: Boolean or integer masks never exceed this many bootstrap cells per chunk (memory bound).
_BOOTSTRAP_CHUNK_CELLS = 4_000_000


def _check_forecast(pred: np.ndarray, y: np.ndarray, quantiles: Sequence[float]) -> None:
    if pred.ndim != 3:
        raise ValueError(f"quantile forecasts must be [W, H, Q], got shape {pred.shape}")
    if y.shape != pred.shape[:2]:
        raise ValueError(f"outcomes shape {y.shape} does not match forecasts {pred.shape[:2]}")
    if pred.shape[2] != len(quantiles):
        raise ValueError(f"forecasts have {pred.shape[2]} quantiles, expected {len(quantiles)}")


def q_risk(pred: np.ndarray, y: np.ndarray, quantiles: Sequence[float], q: float) -> float:
    """Normalised quantile risk of the TFT paper: 2 * sum pinball(q) / sum |y|, over all
    windows and horizons (Lim et al. 2021, eq. 19)."""
    pred, y = np.asarray(pred, np.float64), np.asarray(y, np.float64)
    _check_forecast(pred, y, quantiles)
    j = quantile_index(quantiles, q)
    err = y - pred[:, :, j]
    loss = pinball_terms(err, q).sum()
    denom = np.abs(y).sum()
    if denom == 0:
        raise ValueError("q-risk undefined: every outcome is zero")
    return float(2.0 * loss / denom)


def quantile_index(quantiles: Sequence[float], q: float) -> int:
    """Index of quantile ``q`` in ``quantiles`` (tolerant to float rounding)."""
    qs = np.asarray(quantiles, np.float64)
    hits = np.flatnonzero(np.isclose(qs, q, atol=1e-9))
    if hits.size == 0:
        raise ValueError(f"quantile {q} not among the model's quantiles {list(quantiles)}")
    return int(hits[0])


def interval_coverage(
    pred: np.ndarray, y: np.ndarray, quantiles: Sequence[float], lower: float = 0.1,
    upper: float = 0.9,
) -> float:
    """Fraction of outcomes inside [q_lower, q_upper] (nominal upper - lower), all horizons."""
    pred, y = np.asarray(pred, np.float64), np.asarray(y, np.float64)
    _check_forecast(pred, y, quantiles)
    lo = pred[:, :, quantile_index(quantiles, lower)]
    hi = pred[:, :, quantile_index(quantiles, upper)]
    return float(((y >= lo) & (y <= hi)).mean())


def calibration_table(
    pred: np.ndarray, y: np.ndarray, quantiles: Sequence[float]
) -> list[dict[str, float]]:
    """Nominal quantile vs observed fraction of outcomes below it, pooled and per horizon."""
    pred, y = np.asarray(pred, np.float64), np.asarray(y, np.float64)
    _check_forecast(pred, y, quantiles)
    below = y[:, :, None] < pred  # [W, H, Q]
    rows = []
    for j, q in enumerate(quantiles):
        row = {"quantile": float(q), "observed": float(below[:, :, j].mean())}
        for h in range(pred.shape[1]):
            row[f"observed_h{h + 1}"] = float(below[:, h, j].mean())
        rows.append(row)
    return rows


def median_mae(pred: np.ndarray, y: np.ndarray, quantiles: Sequence[float]) -> float:
    pred, y = np.asarray(pred, np.float64), np.asarray(y, np.float64)
    _check_forecast(pred, y, quantiles)
    return float(np.abs(y - pred[:, :, quantile_index(quantiles, 0.5)]).mean())


def direction_hits(forecast: np.ndarray, outcome: np.ndarray) -> np.ndarray:
    """1.0 where sign(forecast) == sign(outcome), 0.0 otherwise. Zero outcomes are dropped
    (no direction to get right), and so are zero forecasts (no direction called)."""
    f, o = np.asarray(forecast, np.float64).ravel(), np.asarray(outcome, np.float64).ravel()
    if f.shape != o.shape:
        raise ValueError(f"forecast shape {f.shape} does not match outcome shape {o.shape}")
    keep = np.isfinite(o) & (o != 0) & (f != 0)
    return (np.sign(f[keep]) == np.sign(o[keep])).astype(np.float64)


def directional_accuracy(forecast: np.ndarray, outcome: np.ndarray) -> float:
    hits = direction_hits(forecast, outcome)
    return float(hits.mean()) if hits.size else float("nan")


# --- trading-series statistics -------------------------------------------------------


def sortino_ratio(pnl: np.ndarray, periods_per_year: float) -> float:
    """Annualised mean over downside deviation sqrt(mean(min(pnl, 0)^2)), target 0."""
    x = np.asarray(pnl, np.float64)
    if x.size < 2:
        return float("nan")
    dd = np.sqrt(np.mean(np.minimum(x, 0.0) ** 2))
    if dd == 0:
        return 0.0 if x.mean() == 0 else float(np.inf)
    return float(x.mean() / dd * np.sqrt(periods_per_year))


def max_drawdown(equity: np.ndarray, start: float = 0.0) -> float:
    """Largest peak-to-trough fall of an additive equity curve (cumulative log pnl), as a
    positive number in the curve's units; the curve starts from ``start`` before bar 0."""
    e = np.concatenate([[start], np.asarray(equity, np.float64)])
    return float(np.max(np.maximum.accumulate(e) - e))


# --- block bootstrap ------------------------------------------------------------------


@dataclass(frozen=True)
class BootstrapCI:
    estimate: float
    low: float
    high: float
    level: float
    block_length: int
    n_resamples: int

    def includes(self, value: float) -> bool:
        return self.low <= value <= self.high


def default_block_length(n: int) -> int:
    """n^(1/3), the rate-optimal order for block bootstraps of the mean."""
    return max(1, int(round(n ** (1.0 / 3.0))))


def block_bootstrap_ci(
    x: np.ndarray,
    statistic: Callable[[np.ndarray], np.ndarray],
    *,
    n_resamples: int = 1000,
    block_length: int | None = None,
    level: float = 0.95,
    seed: int = 0,
) -> BootstrapCI:
    """Circular block bootstrap percentile CI of ``statistic``.

    ``statistic`` maps a ``[R, n]`` array of resampled series to ``[R]`` values (vectorised)."""
    x = np.asarray(x, np.float64)
    n = x.size
    estimate = float(statistic(x[None, :])[0]) if n else float("nan")
    if n < 2 or n_resamples < 1:
        return BootstrapCI(estimate, float("nan"), float("nan"), level, block_length or 1, 0)
    b = block_length or default_block_length(n)
    b = int(min(max(b, 1), n))
    n_blocks = -(-n // b)
    rng = np.random.default_rng(seed)
    offsets = np.arange(b)
    chunk = max(1, _BOOTSTRAP_CHUNK_CELLS // (n_blocks * b))
    stats = []
    for start in range(0, n_resamples, chunk):
        r = min(chunk, n_resamples - start)
        starts = rng.integers(0, n, size=(r, n_blocks))
        idx = ((starts[:, :, None] + offsets[None, None, :]) % n).reshape(r, -1)[:, :n]
        stats.append(np.asarray(statistic(x[idx]), np.float64))
    return _percentile_ci(estimate, np.concatenate(stats), level, b, n_resamples)


def _circular_window_sums(x: np.ndarray, length: int) -> np.ndarray:
    """Sum of ``length`` consecutive values starting at each index, wrapping around."""
    ext = np.concatenate([[0.0], np.cumsum(np.concatenate([x, x[:length]]))])
    return ext[length : length + x.size] - ext[: x.size]


def block_bootstrap_moments(
    x: np.ndarray, *, n_resamples: int = 1000, block_length: int | None = None, seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Sums of x and x^2 of each circular-block resample, from precomputed block sums.

    Draws the same blocks as ``block_bootstrap_ci`` (same seed, same resamples) in
    O(resamples x blocks) instead of O(resamples x n): enough for means, Sharpe, hit rates."""
    x = np.asarray(x, np.float64)
    n = x.size
    b = int(min(max(block_length or default_block_length(n), 1), n))
    n_blocks = -(-n // b)
    tail = n - (n_blocks - 1) * b
    full1, full2 = _circular_window_sums(x, b), _circular_window_sums(x * x, b)
    tail1, tail2 = _circular_window_sums(x, tail), _circular_window_sums(x * x, tail)
    rng = np.random.default_rng(seed)
    chunk = max(1, _BOOTSTRAP_CHUNK_CELLS // n_blocks)
    s1, s2 = [], []
    for start in range(0, n_resamples, chunk):
        starts = rng.integers(0, n, size=(min(chunk, n_resamples - start), n_blocks))
        head, last = starts[:, :-1], starts[:, -1]
        s1.append(full1[head].sum(axis=1) + tail1[last])
        s2.append(full2[head].sum(axis=1) + tail2[last])
    return np.concatenate(s1), np.concatenate(s2), b


def _percentile_ci(estimate: float, stats: np.ndarray, level: float, b: int, r: int
                   ) -> BootstrapCI:
    s = stats[np.isfinite(stats)]
    if s.size == 0:
        return BootstrapCI(estimate, float("nan"), float("nan"), level, b, r)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(s, [alpha, 1.0 - alpha])
    return BootstrapCI(estimate, float(low), float(high), level, b, r)


def sharpe_ci(
    pnl: np.ndarray, periods_per_year: float, *, n_resamples: int = 1000,
    block_length: int | None = None, level: float = 0.95, seed: int = 0,
) -> BootstrapCI:
    x = np.asarray(pnl, np.float64)
    est = sharpe_ratio(x, periods_per_year)
    n = x.size
    if n < 2 or n_resamples < 1:
        return BootstrapCI(est, float("nan"), float("nan"), level, block_length or 1, 0)
    s1, s2, b = block_bootstrap_moments(x, n_resamples=n_resamples, block_length=block_length,
                                        seed=seed)
    var = np.maximum(s2 - s1 * s1 / n, 0.0) / (n - 1)
    sd = np.sqrt(var)
    # a resample with (numerically) no variation has no risk: Sharpe 0, as sharpe_ratio says
    flat = sd <= 1e-12 * np.maximum(np.sqrt(s2 / n), 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):
        stats = np.where(flat, 0.0, (s1 / n) / sd * np.sqrt(periods_per_year))
    return _percentile_ci(est, stats, level, b, n_resamples)


def directional_accuracy_ci(
    forecast: np.ndarray, outcome: np.ndarray, *, n_resamples: int = 1000,
    block_length: int | None = None, level: float = 0.95, seed: int = 0,
) -> BootstrapCI:
    """Bootstraps the hit series in time order (zero outcomes and calls removed first)."""
    hits = direction_hits(forecast, outcome)
    n = hits.size
    est = float(hits.mean()) if n else float("nan")
    if n < 2 or n_resamples < 1:
        return BootstrapCI(est, float("nan"), float("nan"), level, block_length or 1, 0)
    s1, _, b = block_bootstrap_moments(hits, n_resamples=n_resamples, block_length=block_length,
                                       seed=seed)
    return _percentile_ci(est, s1 / n, level, b, n_resamples)


def forecast_metrics(
    pred: np.ndarray, y: np.ndarray, quantiles: Sequence[float]
) -> dict[str, float]:
    """The flat forecaster metric set: pinball per horizon/quantile, q-risk P50/P90, 80%
    coverage, median MAE, directional accuracy of the horizon-1 median."""
    pred, y = np.asarray(pred, np.float64), np.asarray(y, np.float64)
    _check_forecast(pred, y, quantiles)
    pb = pinball_loss(pred, y, quantiles, axis=0)  # [H, Q]
    out: dict[str, float] = {"pinball_mean": float(pb.mean())}
    for h in range(pb.shape[0]):
        for j, q in enumerate(quantiles):
            out[f"pinball_h{h + 1}_q{q:.2f}"] = float(pb[h, j])
    for q in (0.5, 0.9):
        out[f"q_risk_p{round(q * 100)}"] = q_risk(pred, y, quantiles, q)
    out["coverage_80"] = interval_coverage(pred, y, quantiles, 0.1, 0.9)
    out["median_mae"] = median_mae(pred, y, quantiles)
    j = quantile_index(quantiles, 0.5)
    out["directional_accuracy"] = directional_accuracy(pred[:, 0, j], y[:, 0])
    return out
