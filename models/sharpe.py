"""The one Sharpe ratio: the leaderboard, the skill tests, the quantization report and the
agents' reward curves all report this one (ddof 1, zero risk-free rate).

It sits below every other models layer, so the agents (which may not import the
evaluation layer) use it too."""

from __future__ import annotations

import numpy as np


def sharpe_ratio(pnl: np.ndarray, periods_per_year: float) -> float:
    """Annualised Sharpe of per-bar pnl (zero risk-free rate: futures are unfunded).

    ``periods_per_year`` is bars per year for the bar size and session hours (not 252)."""
    x = np.asarray(pnl, np.float64)
    if x.size < 2:
        return float("nan")
    sd = x.std(ddof=1)
    if sd == 0:
        return 0.0 if x.mean() == 0 else float(np.sign(x.mean()) * np.inf)
    return float(x.mean() / sd * np.sqrt(periods_per_year))
