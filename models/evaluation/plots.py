"""Evaluation plots written as PNG files.

Uses ``matplotlib.figure.Figure`` directly (Agg canvas), never pyplot: no global backend
state, no GUI, safe in worker processes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure


def _save(fig: Figure, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=100, bbox_inches="tight")
    return path


def _time_axis(ts_ns: np.ndarray | None, n: int) -> np.ndarray:
    if ts_ns is None:
        return np.arange(n)
    return np.asarray(ts_ns, dtype="datetime64[ns]")


def quantile_fan_chart(
    path: Path,
    quantile_forecast: np.ndarray,
    outcome: np.ndarray,
    quantiles: Sequence[float],
    *,
    ts_ns: np.ndarray | None = None,
    title: str = "",
) -> Path:
    """Nested quantile bands (q, 1-q) of one horizon against the realised outcome."""
    qf = np.asarray(quantile_forecast, np.float64)
    qs = np.asarray(quantiles, np.float64)
    x = _time_axis(ts_ns, qf.shape[0])
    fig = Figure(figsize=(10, 4))
    ax = fig.add_subplot()
    pairs = [(i, int(np.argmin(np.abs(qs - (1 - q))))) for i, q in enumerate(qs) if q < 0.5]
    for k, (lo, hi) in enumerate(sorted(pairs, key=lambda p: qs[p[0]])):
        ax.fill_between(x, qf[:, lo], qf[:, hi], color="tab:blue", alpha=0.15 + 0.1 * k,
                        linewidth=0, label=f"q{qs[lo]:.1f}-q{qs[hi]:.1f}")
    if np.any(np.isclose(qs, 0.5)):
        ax.plot(x, qf[:, int(np.argmin(np.abs(qs - 0.5)))], color="tab:blue", lw=1, label="median")
    ax.plot(x, outcome, color="black", lw=0.7, label="realised")
    ax.set_title(title)
    ax.set_ylabel("forward log return")
    ax.legend(loc="upper right", fontsize=7, ncol=3)
    return _save(fig, path)


def equity_curves(
    path: Path, curves: Mapping[str, np.ndarray], *, ts_ns: np.ndarray | None = None,
    title: str = "",
) -> Path:
    """Cumulative net log return of the model and each baseline on the same bars."""
    fig = Figure(figsize=(10, 4))
    ax = fig.add_subplot()
    for i, (name, eq) in enumerate(curves.items()):
        eq = np.asarray(eq, np.float64)
        ax.plot(_time_axis(ts_ns, eq.shape[0]), eq, lw=1.6 if i == 0 else 0.9, label=name)
    ax.axhline(0.0, color="grey", lw=0.5)
    ax.set_title(title)
    ax.set_ylabel("cumulative net log return")
    ax.legend(loc="upper left", fontsize=8)
    return _save(fig, path)


def calibration_plot(
    path: Path, tables: Mapping[str, Sequence[Mapping[str, float]]], *, title: str = ""
) -> Path:
    """Observed fraction below each quantile against nominal; the diagonal is perfect."""
    fig = Figure(figsize=(5, 5))
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--", label="ideal")
    for name, rows in tables.items():
        nominal = [r["quantile"] for r in rows]
        observed = [r["observed"] for r in rows]
        ax.plot(nominal, observed, marker="o", label=name)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("nominal quantile")
    ax.set_ylabel("observed fraction below")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    return _save(fig, path)
