"""A walk-forward result for people: its folds and pooled metrics as markdown tables, and
the equity chart of the family beside every baseline."""

from __future__ import annotations

from pathlib import Path

from models.evaluation.evaluation_table import float_or_none


def folds_markdown(result) -> str:
    """The folds' train, validation and test periods, one row per fold."""
    lines = ["| fold | train | validation | test |", "|---|---|---|---|"]
    for f in result.folds:
        d = f.describe()
        lines.append(f"| {f.number} | {d['train']} | {d['validation']} | {d['test']} |")
    return "\n".join(lines)


def walk_forward_markdown(result) -> str:
    """Pooled metrics of every candidate, "-" where undefined."""
    cols = ("sharpe", "sharpe_ci_low", "n_trades", "turnover", "hit_rate", "ic", "rank_ic",
            "icir", "ic_ci_low")
    lines = ["| model | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for name, c in result.candidates.items():
        cells = [("-" if (v := float_or_none(c.pooled.get(k))) is None else f"{v:.4g}")
                 for k in cols]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    level = next(iter(result.candidates.values())).pooled.get("ci_level")
    return (f"Pooled over {len(result.folds)} folds; CI lower bounds at the "
            f"Bonferroni-adjusted level {level:.4f}.\n\n" + "\n".join(lines))


def walk_forward_chart(family: str, result, out_dir: Path) -> Path:
    """Equity of the family and every baseline over the walk-forward test folds, per root,
    each fold shaded."""
    # lazy: models.evaluation.plots imports matplotlib, which the code location does not need
    from models.evaluation.plots import walk_forward_equity

    return walk_forward_equity(
        out_dir / f"{family}_walk_forward_equity.png", result,
        title=f"foxhunt-{family} vs baselines, walk-forward test folds (one model per fold), "
              "net of costs")
