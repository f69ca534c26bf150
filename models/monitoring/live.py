"""The champion's live metrics per root and pooled, cumulative since it went live, one row
per live day: Sharpe of the net P&L (annualised as the backtest), IC of the decision
horizon's median forecast with the realised return, and the mean pinball loss."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from models.sharpe import sharpe_ratio

POOLED = "pooled"


@dataclass(frozen=True)
class LiveBars:
    """Realised live rows in time order (one per decision bar and root)."""

    day: np.ndarray  # trade date, str
    root: np.ndarray
    pnl: np.ndarray  # net log return of the position held over the next bar
    forecast: np.ndarray  # median forecast of the decision horizon (NaN: an agent)
    realised: np.ndarray  # realised return over the decision horizon
    pinball: np.ndarray  # NaN until realised, or for an agent

    def subset(self, mask: np.ndarray) -> LiveBars:
        return LiveBars(*(np.asarray(getattr(self, f))[mask] for f in
                          ("day", "root", "pnl", "forecast", "realised", "pinball")))


def _ic(forecast: np.ndarray, realised: np.ndarray) -> float:
    ok = np.isfinite(forecast) & np.isfinite(realised)
    if ok.sum() < 3 or np.ptp(forecast[ok]) == 0 or np.ptp(realised[ok]) == 0:
        return math.nan
    return float(np.corrcoef(forecast[ok], realised[ok])[0, 1])


def _mean(x: np.ndarray) -> float:
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else math.nan


def metrics(bars: LiveBars, bars_per_year: float) -> dict[str, float]:
    pnl = bars.pnl[np.isfinite(bars.pnl)]
    return {"bars": float(pnl.size), "sharpe": sharpe_ratio(pnl, bars_per_year),
            "total_log_return": float(pnl.sum()), "ic": _ic(bars.forecast, bars.realised),
            "pinball": _mean(bars.pinball)}


def cumulative_by_day(bars: LiveBars, bars_per_year: float) -> list[dict]:
    """Per live day and scope (each root, ``pooled``): the metrics of the live bars up to
    and including that day."""
    days = sorted(set(np.asarray(bars.day).tolist()))
    roots = sorted(set(np.asarray(bars.root).tolist()))
    rows = []
    for d in days:
        upto = np.asarray(bars.day) <= d
        for scope in (*roots, POOLED):
            mask = upto if scope == POOLED else upto & (np.asarray(bars.root) == scope)
            rows.append({"trade_date": d, "scope": scope,
                         **metrics(bars.subset(mask), bars_per_year)})
    return rows


def live_bar_counts(bars: LiveBars) -> tuple[list[str], dict[str, list[int]]]:
    """The live days and, per root, its cumulative count of bars with a realised P&L."""
    days = sorted(set(np.asarray(bars.day).tolist()))
    ok = np.isfinite(bars.pnl)
    out = {}
    for r in sorted(set(np.asarray(bars.root).tolist())):
        mine = ok & (np.asarray(bars.root) == r)
        per = [int((mine & (np.asarray(bars.day) == d)).sum()) for d in days]
        out[r] = np.cumsum(per).tolist()
    return days, out


__all__ = ["POOLED", "LiveBars", "cumulative_by_day", "live_bar_counts", "metrics"]
