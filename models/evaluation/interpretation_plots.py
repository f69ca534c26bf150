"""Plots of what a model looks at (the TFT's variable importance and attention), written
with ``matplotlib.figure.Figure`` like ``plots``: no pyplot state."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from models.evaluation.plots import save_png


def variable_importance(path: Path, groups: Mapping[str, Sequence[tuple[str, float]]], *,
                        title: str = "") -> Path:
    """One horizontal bar panel per group (static / encoder / decoder), largest on top."""
    shown = {g: list(v) for g, v in groups.items() if v}
    if not shown:
        shown = {"(no inputs)": [("-", 0.0)]}
    heights = [max(2.0, 0.28 * len(v) + 0.8) for v in shown.values()]
    fig = Figure(figsize=(7.5, sum(heights)))
    axes = fig.subplots(len(shown), 1, gridspec_kw={"height_ratios": heights}, squeeze=False)[:, 0]
    for ax, (group, items) in zip(axes, shown.items(), strict=True):
        names = [n for n, _ in items][::-1]
        values = [w for _, w in items][::-1]
        ax.barh(names, values, color="#3b6ea8")
        ax.set_title(f"{group}: mean variable-selection weight (top {len(items)})", fontsize=10)
        ax.tick_params(axis="y", labelsize=8)
        ax.set_xlim(0, max(values + [1e-9]) * 1.1)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save_png(fig, path)


def attention_by_horizon(path: Path, attention: np.ndarray, lookback: int, *, title: str = "") -> Path:
    """Heat map of attention ``[H, T + H]``: rows are forecast horizons, columns positions
    relative to the forecast origin (0 = last observed bar, negative = history)."""
    att = np.asarray(attention, np.float64)
    h, width = att.shape
    rel = np.arange(width) - (lookback - 1)
    fig = Figure(figsize=(8, 1.2 + 0.45 * h))
    ax = fig.subplots()
    im = ax.imshow(att, aspect="auto", cmap="viridis", interpolation="nearest",
                   extent=(rel[0] - 0.5, rel[-1] + 0.5, h + 0.5, 0.5))
    ax.axvline(0.5, color="white", lw=1, ls="--")
    ax.set_xlabel("bar relative to forecast origin (0 = last observed)")
    ax.set_ylabel("horizon")
    ax.set_yticks(np.arange(1, h + 1))
    ax.set_title(title or "attention by horizon (mean over windows and heads)")
    fig.colorbar(im, ax=ax, fraction=0.03)
    fig.tight_layout()
    return save_png(fig, path)




def agent_behaviour(path: Path, shares: Mapping[str, float], hourly_mean_position: Mapping[int, float], *,
                    title: str = "") -> Path:
    """Left: share of short / flat / long decisions; right: mean position by UTC hour."""
    fig = Figure(figsize=(9, 3.2))
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 2.5]})
    names = list(shares)
    left.bar(names, [shares[n] for n in names], color=["#b03a2e", "#7f8c8d", "#1e8449"][: len(names)])
    left.set_ylim(0, 1)
    left.set_title("action share", fontsize=10)
    hours = sorted(hourly_mean_position)
    values = [hourly_mean_position[h] for h in hours]
    right.bar(hours, values, color=["#1e8449" if v >= 0 else "#b03a2e" for v in values])
    right.axhline(0, color="black", lw=0.8)
    right.set_xlim(-0.5, 23.5)
    right.set_ylim(-1.05, 1.05)
    right.set_xlabel("hour of day (UTC)")
    right.set_title("mean position by hour (-1 short, +1 long)", fontsize=10)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save_png(fig, path)


__all__ = ["agent_behaviour", "attention_by_horizon", "variable_importance"]
