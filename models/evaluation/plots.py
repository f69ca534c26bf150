"""Evaluation plots written as PNG files.

Uses ``matplotlib.figure.Figure`` directly (Agg canvas), never pyplot: no global backend
state, no GUI, safe in worker processes.

Bars of several roots (ES, ZN ...) share the test period: a series is split by root and
each root gets its own panel on its own time axis, so no line jumps from the end of one
root back to the start of the next. The ``*_figure`` builders return the figure (tests read
its panels); the others save it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

FOLD_COLOURS = ("tab:grey", "tab:olive")


@dataclass(frozen=True)
class FoldSpan:
    """A walk-forward fold's test period, shaded on a time axis."""

    number: int
    start_ns: int
    end_ns: int


def save_png(fig: Figure, path: Path) -> Path:
    """Write ``fig`` as a PNG at ``path`` (parents created): every plot here is saved alike."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=100, bbox_inches="tight")
    return path


def _time_axis(ts_ns: np.ndarray | None, n: int) -> np.ndarray:
    if ts_ns is None:
        return np.arange(n)
    return np.asarray(ts_ns, dtype="datetime64[ns]")


def root_order(roots: np.ndarray | Sequence[str] | None, n: int,
               ts_ns: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Indices of each root's bars, in time order (stable: bar order breaks ties); one
    ``"all"`` group when ``roots`` is None."""
    if roots is None:
        groups = {"all": np.arange(n)}
    else:
        r = np.asarray(roots).astype(str)
        if r.shape[0] != n:
            raise ValueError(f"roots has {r.shape[0]} entries for {n} bars")
        groups = {str(k): np.flatnonzero(r == k) for k in dict.fromkeys(r.tolist())}
    if ts_ns is None:
        return groups
    ts = np.asarray(ts_ns, np.int64)
    return {k: idx[np.argsort(ts[idx], kind="stable")] for k, idx in groups.items()}


def equity_by_root(
    pnl: Mapping[str, np.ndarray], roots: np.ndarray | Sequence[str] | None,
    ts_ns: np.ndarray | None = None,
) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """``{root: {model: (x, cumulative net log return)}}``: each model's per-bar pnl summed
    over that root's bars in time order (``x``: timestamps in ns, or the bar index)."""
    sizes = {k: np.asarray(v).shape[0] for k, v in pnl.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"models have different numbers of bars: {sizes}")
    n = next(iter(sizes.values()), 0)
    out: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for root, idx in root_order(roots, n, ts_ns).items():
        x = np.asarray(ts_ns, np.int64)[idx] if ts_ns is not None else np.arange(idx.size)
        out[root] = {name: (x, np.cumsum(np.asarray(p, np.float64)[idx]))
                     for name, p in pnl.items()}
    return out


def fold_spans(folds: Sequence[Any]) -> list[FoldSpan]:
    """Test periods of walk-forward folds (``FoldResult``: ``fold.number``,
    ``test_start_ns``, ``test_end_ns``)."""
    return [FoldSpan(int(f.fold.number), int(f.test_start_ns), int(f.test_end_ns))
            for f in folds]


def _shade_folds(ax: Any, folds: Sequence[FoldSpan]) -> None:
    for k, f in enumerate(folds):
        lo, hi = np.datetime64(f.start_ns, "ns"), np.datetime64(f.end_ns, "ns")
        ax.axvspan(lo, hi, color=FOLD_COLOURS[k % 2], alpha=0.12, lw=0, gid=f"fold {f.number}")
        ax.annotate(f"fold {f.number}", (lo, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(2, -10), textcoords="offset points", fontsize=7, color="dimgrey")


def equity_figure(
    pnl: Mapping[str, np.ndarray], *, roots: np.ndarray | Sequence[str] | None = None,
    ts_ns: np.ndarray | None = None, folds: Sequence[FoldSpan] = (), title: str = "",
) -> Figure:
    """One panel per root, one line per model: cumulative net log return over that root's
    bars in time order; walk-forward ``folds`` shaded (time axis only)."""
    series = equity_by_root(pnl, roots, ts_ns)
    fig = Figure(figsize=(10, 2.6 * max(len(series), 1) + 0.8))
    axes = fig.subplots(max(len(series), 1), 1, squeeze=False, sharex=ts_ns is not None)[:, 0]
    for ax, (root, curves) in zip(axes, series.items(), strict=False):
        for i, (name, (x, eq)) in enumerate(curves.items()):
            ax.plot(_time_axis(x if ts_ns is not None else None, eq.shape[0]), eq,
                    lw=1.6 if i == 0 else 0.9, label=name)
        if ts_ns is not None:
            _shade_folds(ax, folds)
        ax.axhline(0.0, color="grey", lw=0.5)
        ax.set_title(f"{root}: cumulative net log return" if root != "all"
                     else "cumulative net log return")
        ax.set_ylabel("net log return")
    axes[0].legend(loc="best", fontsize=7, ncol=2)
    axes[-1].set_xlabel("time (UTC)" if ts_ns is not None else "bar")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def equity_curves(
    path: Path, pnl: Mapping[str, np.ndarray], *, roots: np.ndarray | Sequence[str] | None = None,
    ts_ns: np.ndarray | None = None, folds: Sequence[FoldSpan] = (), title: str = "",
) -> Path:
    """Per-bar net pnl of the model and each baseline on the same bars, as equity per root."""
    return save_png(equity_figure(pnl, roots=roots, ts_ns=ts_ns, folds=folds, title=title), path)


def walk_forward_equity(path: Path, result: Any, *, title: str = "") -> Path:
    """Every candidate of a ``WalkForwardResult`` on its pooled test bars, per root, with
    each fold's test period shaded."""
    cands = result.candidates
    first = next(iter(cands.values()))
    pnl = {name: c.bars.pnl for name, c in cands.items()}
    return equity_curves(path, pnl, roots=first.bars.root, ts_ns=first.bars.ts,
                         folds=fold_spans(first.folds), title=title)


def fan_chart_title(root: str, horizon: int, n_bars: int) -> str:
    return f"{root}, horizon {horizon} ({horizon}-bar ahead log return): first {n_bars} test bars"


def quantile_fan_figure(
    quantile_forecast: np.ndarray, outcome: np.ndarray, quantiles: Sequence[float], *,
    roots: np.ndarray | Sequence[str] | None = None, horizon: int = 1,
    ts_ns: np.ndarray | None = None, max_bars: int | None = None, title: str = "",
) -> Figure:
    """Nested quantile bands (q, 1-q) of one ``horizon`` against the realised outcome: one
    panel per root (its first ``max_bars`` bars in time order), titled with root and horizon."""
    qf = np.asarray(quantile_forecast, np.float64)
    y = np.asarray(outcome, np.float64)
    qs = np.asarray(quantiles, np.float64)
    groups = root_order(roots, qf.shape[0], ts_ns)
    fig = Figure(figsize=(10, 3.2 * max(len(groups), 1) + 0.6))
    axes = fig.subplots(max(len(groups), 1), 1, squeeze=False)[:, 0]
    pairs = [(i, int(np.argmin(np.abs(qs - (1 - q))))) for i, q in enumerate(qs) if q < 0.5]
    for ax, (root, idx) in zip(axes, groups.items(), strict=False):
        idx = idx[:max_bars] if max_bars else idx
        x = _time_axis(None if ts_ns is None else np.asarray(ts_ns)[idx], idx.size)
        for k, (lo, hi) in enumerate(sorted(pairs, key=lambda p: qs[p[0]])):
            ax.fill_between(x, qf[idx, lo], qf[idx, hi], color="tab:blue",
                            alpha=0.15 + 0.1 * k, linewidth=0,
                            label=f"q{qs[lo]:.1f}-q{qs[hi]:.1f}")
        if np.any(np.isclose(qs, 0.5)):
            ax.plot(x, qf[idx, int(np.argmin(np.abs(qs - 0.5)))], color="tab:blue", lw=1,
                    label="median")
        ax.plot(x, y[idx], color="black", lw=0.7, label="realised")
        ax.set_title(fan_chart_title(root, horizon, idx.size))
        ax.set_ylabel("log return")
        ax.legend(loc="upper right", fontsize=7, ncol=3)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def quantile_fan_chart(
    path: Path, quantile_forecast: np.ndarray, outcome: np.ndarray, quantiles: Sequence[float],
    *, roots: np.ndarray | Sequence[str] | None = None, horizon: int = 1,
    ts_ns: np.ndarray | None = None, max_bars: int | None = None, title: str = "",
) -> Path:
    """:func:`quantile_fan_figure`, saved."""
    return save_png(quantile_fan_figure(quantile_forecast, outcome, quantiles, roots=roots,
                                     horizon=horizon, ts_ns=ts_ns, max_bars=max_bars,
                                     title=title), path)


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
    return save_png(fig, path)
