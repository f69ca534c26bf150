"""From a forecast to a position: the cost-aware rules every forecaster trades by.

The evaluation scores forecasters through them and the PPO agent imitates them
(``models.agents.imitation``), so they sit below both. Forecasts are log returns, costs
one-way log returns; positions are -1, 0 or 1.
"""

from __future__ import annotations

import numpy as np


def as_1d(name: str, a: np.ndarray, n: int | None = None) -> np.ndarray:
    """``a`` as an array, checked one-dimensional (and ``n`` long when given); the error names it."""
    a = np.asarray(a)
    if a.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {a.shape}")
    if n is not None and a.shape[0] != n:
        raise ValueError(f"{name} has {a.shape[0]} rows, expected {n} (one per bar)")
    return a


def _finite_forecast(f: np.ndarray) -> np.ndarray:
    if not np.isfinite(f).all():
        i = int(np.flatnonzero(~np.isfinite(f))[0])
        raise ValueError(f"forecast is not finite at row {i}: {f[i]!r}")
    return f


def threshold_positions(
    forecast_log_return: np.ndarray, cost: np.ndarray | float, k: float = 1.0
) -> np.ndarray:
    """Cost-aware sign rule: long if forecast > k * cost, short if < -k * cost, else flat."""
    f = _finite_forecast(np.asarray(forecast_log_return, np.float64))
    band = k * np.broadcast_to(np.asarray(cost, np.float64), f.shape)
    return np.where(f > band, 1.0, np.where(f < -band, -1.0, 0.0))


def band_action(forecast_log_return: np.ndarray, band: np.ndarray | float,
                held: np.ndarray | float) -> np.ndarray:
    """The no-trade band, one step: enter (or flip) where the forecast is beyond +/-``band``,
    keep ``held`` while the forecast keeps its sign, go flat when the sign turns.

    Why: holding is free and every change pays the cost, so a position worth entering at
    ``band`` is worth keeping until its expected return turns negative. The symmetric rule
    (``threshold_positions``) left each trade as soon as the forecast fell inside the band and
    paid to re-enter; on the generator's drift it traded about twice as often for a lower
    Sharpe, and the generator's oracle uses this rule (``synthetic.signal``)."""
    f = _finite_forecast(np.asarray(forecast_log_return, np.float64))
    b = np.broadcast_to(np.asarray(band, np.float64), f.shape)
    h = np.broadcast_to(np.asarray(held, np.float64), f.shape)
    side = np.sign(f)
    return np.where(np.abs(f) > b, side, np.where((side == np.sign(h)) & (side != 0), h, 0.0))


def band_positions(
    forecast_log_return: np.ndarray, cost: np.ndarray | float, segment: np.ndarray,
    k: float = 1.0,
) -> np.ndarray:
    """``band_action`` applied bar after bar (band ``k`` x the one-way cost), flat at the start
    of each ``segment``: the forecasters' trading rule on the walk-forward protocol.

    Vectorised: within a run of bars whose forecast keeps one sign (and one segment), the
    position is that sign from the first bar beyond the band on, and flat before it."""
    f = as_1d("forecast", np.asarray(forecast_log_return, np.float64))
    n = f.shape[0]
    band = k * np.broadcast_to(np.asarray(cost, np.float64), f.shape)
    side = np.sign(_finite_forecast(f))
    seg = as_1d("segment", segment, n)
    run_start = np.ones(n, dtype=bool)
    run_start[1:] = (side[1:] != side[:-1]) | (seg[1:] != seg[:-1])
    first = np.maximum.accumulate(np.where(run_start, np.arange(n), 0))
    beyond = np.abs(f) > band
    last_beyond = np.maximum.accumulate(np.where(beyond, np.arange(n), -1))
    return np.where(last_beyond >= first, side, 0.0)
