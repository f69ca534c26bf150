"""Skill metrics of scored test bars, with confidence intervals at a level that accounts
for how many models and baselines are compared (Bonferroni): Sharpe (pooled and per root),
trades, turnover, hit rate, and the information coefficient of the median forecast per
horizon, per trade day and pooled."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import rankdata

from models.evaluation.metrics import (
    block_bootstrap_ci,
    direction_hits,
    directional_accuracy_ci,
    sharpe_ci,
)
from models.sharpe import sharpe_ratio

FAMILY_WISE_ALPHA = 0.05
#: ICIR (mean / std of the daily IC) needs this many days of at least MIN_IC_DAY_BARS scored
#: bars each: fewer, or a 60-bar stub of a day, gives a number that means nothing (NaN)
MIN_IC_DAYS = 5
MIN_IC_DAY_BARS = 100
#: risk-adjusted metrics that a candidate which never held a position does not have
IDLE_UNDEFINED = ("sharpe", "sharpe_ci_low", "sharpe_ci_high", "sortino")


@dataclass
class ScoredBars:
    """One candidate's test bars of one fold (or of all folds, concatenated)."""

    pnl: np.ndarray
    positions: np.ndarray
    returns: np.ndarray
    root: np.ndarray
    day: np.ndarray
    ts: np.ndarray
    n_trades: float
    turnover: float
    median: np.ndarray | None = None  # [N, H] median forecast, target-scaled
    outcome: np.ndarray | None = None  # [N, H] realised, target-scaled
    quantile_metrics: dict[str, float] = field(default_factory=dict)

    @staticmethod
    def concat(parts: Sequence[ScoredBars]) -> ScoredBars:
        def cat(a: str) -> np.ndarray:
            return np.concatenate([getattr(p, a) for p in parts])
        forecasts = all(p.median is not None for p in parts)
        return ScoredBars(
            pnl=cat("pnl"), positions=cat("positions"), returns=cat("returns"), root=cat("root"),
            day=cat("day"), ts=cat("ts"), n_trades=float(sum(p.n_trades for p in parts)),
            turnover=float(sum(p.turnover for p in parts)),
            median=cat("median") if forecasts else None,
            outcome=cat("outcome") if forecasts else None)


def bonferroni_level(n_compared: int, alpha: float = FAMILY_WISE_ALPHA) -> float:
    """Two-sided CI level so that any of ``n_compared`` lower bounds above 0 by chance stays
    under ``alpha`` (each lower tail holds alpha / (2 n))."""
    return 1.0 - alpha / max(int(n_compared), 1)


def _corr_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson correlation of each row pair of ``[R, n]`` arrays (NaN when one is constant)."""
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    den = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (a * b).sum(axis=1) / den
    scale = np.sqrt(np.maximum((a * a).sum(axis=1), (b * b).sum(axis=1)))
    return np.where(den > 1e-12 * np.maximum(scale, 1e-300) ** 2, out, np.nan)


def _rank(x: np.ndarray) -> np.ndarray:
    return rankdata(x).astype(np.float64)


def idle_is_undefined(metrics: dict[str, float], positions: np.ndarray) -> dict[str, float]:
    """``metrics`` with the risk-adjusted ones NaN when no position was ever held: a Sharpe
    of a series of zeros is 0 / 0, not 0 (the table, the leaderboard and the charts show
    NULL / "-")."""
    if np.any(np.asarray(positions) != 0):
        return metrics
    return {k: (math.nan if k in IDLE_UNDEFINED else v) for k, v in metrics.items()}


def information_coefficients(median: np.ndarray, outcome: np.ndarray, day: np.ndarray,
                             min_days: int = MIN_IC_DAYS, min_day_bars: int = MIN_IC_DAY_BARS
                             ) -> dict[str, float]:
    """IC (Pearson) and rank IC of the median forecast against the realised return, per
    horizon, pooled; ICIR = mean / std of the daily IC (horizon 1) over the days with at
    least ``min_day_bars`` scored bars, NaN with fewer than ``min_days`` such days."""
    out: dict[str, float] = {}
    for h in range(median.shape[1]):
        f, y = median[:, h], outcome[:, h]
        ok = np.isfinite(f) & np.isfinite(y)
        ic = float(_corr_rows(f[ok][None], y[ok][None])[0]) if ok.sum() > 2 else math.nan
        ric = (float(_corr_rows(_rank(f[ok])[None], _rank(y[ok])[None])[0])
               if ok.sum() > 2 else math.nan)
        out[f"ic_h{h + 1}"], out[f"rank_ic_h{h + 1}"] = ic, ric
    out["ic"], out["rank_ic"] = out["ic_h1"], out["rank_ic_h1"]
    daily = []
    for d in np.unique(day):
        m = (day == d) & np.isfinite(median[:, 0]) & np.isfinite(outcome[:, 0])
        if m.sum() >= max(min_day_bars, 3):
            daily.append(float(_corr_rows(median[m, 0][None], outcome[m, 0][None])[0]))
    daily_arr = np.asarray([v for v in daily if math.isfinite(v)])
    sd = daily_arr.std(ddof=1) if daily_arr.size > 1 else math.nan
    out["ic_daily_mean"] = float(daily_arr.mean()) if daily_arr.size else math.nan
    enough = daily_arr.size >= min_days and math.isfinite(sd) and sd > 0
    out["icir"] = float(daily_arr.mean() / sd) if enough else math.nan
    out["ic_days"] = float(daily_arr.size)
    return out


def ic_ci(median: np.ndarray, outcome: np.ndarray, *, level: float, n_resamples: int,
          seed: int) -> tuple[float, float]:
    """Block bootstrap CI of the pooled horizon-1 IC (pairs resampled in time blocks)."""
    f, y = median[:, 0], outcome[:, 0]
    ok = np.isfinite(f) & np.isfinite(y)
    f, y = f[ok], y[ok]
    if f.size < 3 or n_resamples < 1:
        return math.nan, math.nan

    def stat(idx: np.ndarray) -> np.ndarray:
        i = idx.astype(np.int64)
        return _corr_rows(f[i], y[i])

    ci = block_bootstrap_ci(np.arange(f.size, dtype=np.float64), stat,
                            n_resamples=n_resamples, level=level, seed=seed)
    return ci.low, ci.high


def bar_metrics(bars: ScoredBars, bars_per_year: float, *, level: float, bootstrap: int,
                seed: int) -> dict[str, float]:
    """The metric set of one fold or of the pool; NaN where a metric is undefined (a
    candidate that never held a position has no Sharpe)."""
    n = bars.pnl.size
    sci = sharpe_ci(bars.pnl, bars_per_year, n_resamples=bootstrap, level=level, seed=seed)
    held = bars.positions != 0
    hits = direction_hits(bars.positions[held], bars.returns[held])
    m: dict[str, float] = {
        "n_bars": float(n),
        "sharpe": sharpe_ratio(bars.pnl, bars_per_year),
        "sharpe_ci_low": sci.low, "sharpe_ci_high": sci.high,
        "ci_level": level,
        "annual_log_return": float(bars.pnl.mean() * bars_per_year) if n else math.nan,
        "total_log_return": float(bars.pnl.sum()),
        "n_trades": bars.n_trades,
        "turnover": bars.turnover,
        "turnover_per_year": bars.turnover / n * bars_per_year if n else math.nan,
        "exposure": float(np.abs(bars.positions).mean()) if n else math.nan,
        "hit_rate": float(hits.mean()) if hits.size else math.nan,
    }
    if hits.size > 1:
        dci = directional_accuracy_ci(bars.positions[held], bars.returns[held],
                                      n_resamples=bootstrap, level=level, seed=seed)
        m["hit_rate_ci_low"] = dci.low
    eq = np.cumsum(bars.pnl)
    m["max_drawdown"] = float(np.max(np.maximum.accumulate(np.concatenate([[0.0], eq]))
                                     - np.concatenate([[0.0], eq]))) if n else math.nan
    for r in np.unique(bars.root):
        mine = bars.root == r
        held_r = np.any(bars.positions[mine] != 0)
        m[f"sharpe_{r}"] = sharpe_ratio(bars.pnl[mine], bars_per_year) if held_r else math.nan
    m = idle_is_undefined(m, bars.positions)
    if bars.median is not None and bars.outcome is not None:
        m.update(information_coefficients(bars.median, bars.outcome, bars.day))
        m["ic_ci_low"], m["ic_ci_high"] = ic_ci(bars.median, bars.outcome, level=level,
                                                n_resamples=bootstrap, seed=seed)
    return m
