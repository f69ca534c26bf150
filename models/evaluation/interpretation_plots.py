"""Plots of what a model looks at (the TFT's variable importance and attention), written
with ``matplotlib.figure.Figure`` like ``plots``: no pyplot state."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from models.evaluation.plots import _save


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
    return _save(fig, path)


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
    return _save(fig, path)


__all__ = ["attention_by_horizon", "variable_importance"]
