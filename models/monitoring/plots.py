"""The live-versus-backtest chart: the champion's live cumulative net log return and rolling
Sharpe per day beside the band its walk-forward predicts for that many days (``band``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from models.evaluation.plots import save_png
from models.monitoring.band import Band


def live_vs_backtest_figure(band: Band, live_equity: Sequence[float],
                            live_sharpe: Sequence[float], title: str) -> Figure:
    """Two panels over the live days: equity, then Sharpe; the band's 5th-95th percentile
    shaded, its median dashed, the live curve on top."""
    fig = Figure(figsize=(9, 6))
    x = np.arange(len(band.days))
    for ax, what, live, label in (
            (fig.add_subplot(2, 1, 1), band.equity, live_equity, "cumulative net log return"),
            (fig.add_subplot(2, 1, 2), band.sharpe, live_sharpe, "Sharpe since live start")):
        ax.fill_between(x, what[:, 0], what[:, 2], color="tab:blue", alpha=0.2,
                        label="backtest 5th-95th pct (block bootstrap of the test folds)")
        ax.plot(x, what[:, 1], "--", color="tab:blue", label="backtest median")
        ax.plot(x, np.asarray(live, np.float64), "o-", color="tab:red", label="live")
        ax.set_ylabel(label)
        ax.set_xticks(x, band.days, rotation=45, ha="right", fontsize=7)
        ax.grid(alpha=0.3)
    fig.axes[0].legend(fontsize=7, loc="best")
    fig.axes[0].set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def live_vs_backtest(path: Path, band: Band, live_equity: Sequence[float],
                     live_sharpe: Sequence[float], title: str) -> Path:
    return save_png(live_vs_backtest_figure(band, live_equity, live_sharpe, title), path)


__all__ = ["live_vs_backtest", "live_vs_backtest_figure"]
