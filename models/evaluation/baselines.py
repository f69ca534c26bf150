"""Naive baselines every model is shown next to, on the same rows and costs.

Trading baselines return positions for the decision rows of a split; the climatology
baseline returns quantile forecasts. All use only data available at the decision row.
"""

from __future__ import annotations

import numpy as np

from models.windows import SplitArrays


def flat_positions(n: int) -> np.ndarray:
    return np.zeros(n)


def buy_and_hold_positions(n: int) -> np.ndarray:
    return np.ones(n)


def trailing_return(split: SplitArrays, rows: np.ndarray, n: int) -> np.ndarray:
    """Log return over the ``n`` bars ending at each row's close (rows ``t-n .. t-1`` of the
    horizon-1 target), NaN where that span leaves the row's segment or has a gap."""
    if n < 1:
        raise ValueError(f"momentum lookback must be >= 1 bar, got {n}")
    rows = np.asarray(rows, np.int64)
    r1 = np.asarray(split.targets[:, 0], np.float64)
    seg = np.asarray(split.segment)
    csum = np.concatenate([[0.0], np.cumsum(np.where(np.isfinite(r1), r1, 0.0))])
    bad = np.concatenate([[0], np.cumsum(~np.isfinite(r1))])
    lo = rows - n
    ok = lo >= 0
    lo_c = np.clip(lo, 0, None)
    ok &= seg[lo_c] == seg[rows]
    ok &= (bad[rows] - bad[lo_c]) == 0
    out = csum[rows] - csum[lo_c]
    return np.where(ok, out, np.nan)


def momentum_positions(split: SplitArrays, rows: np.ndarray, n: int = 1) -> np.ndarray:
    """Sign of the last ``n``-bar return; flat where it is unknown or zero."""
    past = trailing_return(split, rows, n)
    return np.where(np.isfinite(past), np.sign(past), 0.0)


def climatology_forecast(climatology: np.ndarray, n_windows: int) -> np.ndarray:
    """The same ``[H, Q]`` forecast for every window: ``[W, H, Q]``."""
    return np.broadcast_to(climatology, (n_windows, *climatology.shape)).copy()
