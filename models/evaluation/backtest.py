"""Vectorised bar backtest with costs, roll-aware (the forecast-to-position rules are in
``models.trading_rules``).

Protocol (the same for every model and baseline):

- ``positions[t]`` in [-1, 1] is decided with data up to the close of row ``t`` and held
  from ``t`` to ``t + 1``, earning ``returns[t]`` (the horizon-1 target of row ``t``: the
  log return from close ``t`` to close ``t + 1``). No row's position sees its own return.
- Every position change pays ``cost[t] * |pos_t - pos_{t-1}|`` (one-way cost as a log
  return, per contract traded).
- A position never spans a segment (root x contract): it is closed on the last row of
  each segment, paying the exit cost, and the next segment starts flat. Rows whose return
  is missing (contract end) are forced flat.
- The position still open at the end of the series is marked to market, not closed
  (so buy-and-hold over one segment earns the sum of returns minus one entry cost).

All returns and pnl are log returns, so they add across bars.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.evaluation.metrics import max_drawdown, sortino_ratio
from models.sharpe import sharpe_ratio
from models.trading_rules import as_1d


@dataclass
class BacktestResult:
    pnl: np.ndarray  # net per-bar pnl (log return)
    gross_pnl: np.ndarray
    costs: np.ndarray
    positions: np.ndarray  # effective positions after forced flats
    trade_pnl: np.ndarray  # net pnl of each trade (see ``run_backtest``)
    metrics: dict[str, float]

    @property
    def equity(self) -> np.ndarray:
        """Cumulative net log return after each bar."""
        return np.cumsum(self.pnl)


def validate_positions(positions: np.ndarray, n: int | None = None) -> np.ndarray:
    """Positions as float64, finite and within [-1, 1]; the error names the first bad row."""
    p = as_1d("positions", positions, n).astype(np.float64)
    bad = ~np.isfinite(p) | (np.abs(p) > 1.0 + 1e-12)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"positions must be finite and in [-1, 1]; row {i} is {p[i]!r}")
    return np.clip(p, -1.0, 1.0)


def run_backtest(
    positions: np.ndarray,
    returns: np.ndarray,
    cost: np.ndarray | float,
    segment: np.ndarray,
    bars_per_year: float,
) -> BacktestResult:
    """Backtest ``positions`` over consecutive bars (see the module docstring for the rules).

    A *trade* is a maximal run of bars whose position keeps one non-zero sign within one
    segment (resizing on the same side does not start a new one). Its pnl is the gross pnl
    of its bars minus its entry, resizing and exit costs (a flip's cost is split between
    the trade it closes and the one it opens).
    """
    r = as_1d("returns", returns).astype(np.float64)
    n = r.shape[0]
    p = validate_positions(positions, n)
    seg = as_1d("segment", segment, n)
    c = np.broadcast_to(np.asarray(cost, np.float64), (n,)).copy()
    if (~np.isfinite(c) | (c < 0)).any():
        raise ValueError("cost must be finite and non-negative")

    has_ret = np.isfinite(r)
    p = np.where(has_ret, p, 0.0)
    r = np.where(has_ret, r, 0.0)
    new_seg = np.ones(n, dtype=bool)
    new_seg[1:] = seg[1:] != seg[:-1]
    seg_end = np.zeros(n, dtype=bool)
    seg_end[:-1] = new_seg[1:]
    prev = np.zeros(n)
    prev[1:] = p[:-1]
    prev[new_seg] = 0.0  # the previous segment was closed on its last row

    change = np.abs(p - prev)
    forced_close = np.where(seg_end, np.abs(p), 0.0)
    costs = c * (change + forced_close)
    gross = p * r
    pnl = gross - costs

    trade_pnl = _trade_pnl(p, prev, gross, c, forced_close)
    metrics = _backtest_metrics(pnl, p, change + forced_close, costs, trade_pnl, bars_per_year)
    return BacktestResult(pnl=pnl, gross_pnl=gross, costs=costs, positions=p,
                          trade_pnl=trade_pnl, metrics=metrics)


def _backtest_metrics(pnl: np.ndarray, p: np.ndarray, traded: np.ndarray, costs: np.ndarray,
                      trade_pnl: np.ndarray, bars_per_year: float) -> dict[str, float]:
    """The flat metric set of a backtest; ``traded`` is the position change charged per bar."""
    n = pnl.shape[0]
    in_pos = p != 0
    turnover = float(traded.sum())
    return {
        "n_bars": float(n),
        "total_log_return": float(pnl.sum()),
        "annual_log_return": float(pnl.mean() * bars_per_year) if n else float("nan"),
        "sharpe": sharpe_ratio(pnl, bars_per_year),
        "sortino": sortino_ratio(pnl, bars_per_year),
        "max_drawdown": max_drawdown(np.cumsum(pnl)) if n else 0.0,
        "win_rate_bars": float((pnl[in_pos] > 0).mean()) if in_pos.any() else float("nan"),
        "win_rate_trades": float((trade_pnl > 0).mean()) if trade_pnl.size else float("nan"),
        "n_trades": float(trade_pnl.size),
        "turnover": turnover,
        "turnover_per_year": turnover / n * bars_per_year if n else 0.0,
        "exposure": float(np.abs(p).mean()) if n else 0.0,
        "total_cost": float(costs.sum()),
    }


def _trade_pnl(
    p: np.ndarray, prev: np.ndarray, gross: np.ndarray, c: np.ndarray, forced_close: np.ndarray
) -> np.ndarray:
    sgn, psgn = np.sign(p), np.sign(prev)
    starts = (sgn != 0) & (sgn != psgn)
    n_trades = int(starts.sum())
    if n_trades == 0:
        return np.zeros(0)
    tid = np.cumsum(starts) - 1
    in_pos = sgn != 0
    same_side = in_pos & (sgn == psgn)
    # cost of bar t that belongs to the trade held on bar t: resizing, or opening |p|
    own_cost = np.where(same_side, c * np.abs(p - prev), c * np.abs(p)) + c * forced_close
    totals = np.bincount(tid[in_pos], weights=(gross - own_cost)[in_pos], minlength=n_trades)
    # closing |prev| when the side changes belongs to the trade held on bar t - 1
    closes = (psgn != 0) & (sgn != psgn)
    idx = np.flatnonzero(closes)
    totals -= np.bincount(tid[idx - 1], weights=c[idx] * np.abs(prev[idx]), minlength=n_trades)
    return totals


def decision_rows(window_starts: np.ndarray, lookback: int) -> np.ndarray:
    """Row of each window's last history bar: where its forecast is made and acted on."""
    return np.asarray(window_starts, np.int64) + int(lookback) - 1
