"""After training, what the model looks at, logged to its MLflow run (plots and a CSV table
under ``interpretability/``) and returned as asset metadata with the plots inline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl

from assets.common import markdown_table
from assets.common.metadata_images import image_md
from models.agents.behaviour import behaviour
from models.agents.policy import load_policy
from models.tft.interpret import interpret
from models.training.checkpoint import load_checkpoint
from models.windows import recent_rows

TOP_FEATURES = 20


def tft_interpretability(run: Any, checkpoint: Path, data: Any, out_dir: Path) -> dict[str, Any]:
    """Mean variable-selection weights (top 20 per group) and attention by horizon on the
    validation split; metadata entries ``variable_importance``, ``attention``,
    ``top_features``."""
    # lazy: the plots import matplotlib, which the code location does not need to load
    from models.evaluation.interpretation_plots import attention_by_horizon, variable_importance

    model, _ = load_checkpoint(checkpoint)
    split = "validation" if "validation" in data.splits and data.splits["validation"].n_windows else "train"
    info = interpret(model, data, split=split)
    out_dir.mkdir(parents=True, exist_ok=True)
    where = f"{split} split, {info.n_windows} windows"
    importance = variable_importance(
        out_dir / "tft_variable_importance.png",
        {g: info.top(g, TOP_FEATURES) for g in ("static", "encoder", "decoder")},
        title=f"TFT variable importance ({where})")
    attention = attention_by_horizon(out_dir / "tft_attention_by_horizon.png", info.attention, info.lookback,
                                     title=f"TFT attention by horizon ({where})")
    table = pl.DataFrame(info.rows())
    csv = out_dir / "tft_variable_importance.csv"
    table.write_csv(csv)
    for path in (importance, attention, csv):
        run.log_artifact(path, "interpretability")
    top = table.filter(pl.col("rank") <= 10).with_columns(pl.col("weight").round(4))
    return {
        "variable_importance": image_md(importance, "TFT variable importance", f"mean weights on the {where}"),
        "attention": image_md(attention, "TFT attention by horizon"),
        "top_features": dg.MetadataValue.md(markdown_table(top, max_rows=30)
                                            + "\n\n_full table: MLflow artifact "
                                            "`interpretability/tft_variable_importance.csv`_"),
    }


def agent_behaviour(run: Any, family: str, policy_dir: Path, data: Any, out_dir: Path,
                    rows: int | None = None) -> dict[str, Any]:
    """Action shares and mean position by hour on the validation split, logged and inline.
    ``rows``: on the split's most recent rows only, those the agent was validated on (its
    ``val_rows``), whose state training already computed: the whole split of a year is
    months of bars, each needing both forecasters (issue 41)."""
    # lazy: see tft_interpretability
    from models.evaluation.interpretation_plots import agent_behaviour as plot

    split = "validation" if "validation" in data.splits else "train"
    whole = data.splits[split].n_rows
    data = recent_rows(data, {split: rows})
    b = behaviour(load_policy(policy_dir), data, split)
    out_dir.mkdir(parents=True, exist_ok=True)
    where = (f"the {split} split" if data.splits[split].n_rows == whole
             else f"the last {data.splits[split].n_rows:,} rows of the {split} split")
    png = plot(out_dir / f"{family}_behaviour_by_hour.png", b.shares, b.hourly_mean_position,
               title=f"{family} on {where} ({b.n_decisions} decisions)")
    csv = out_dir / f"{family}_position_by_hour.csv"
    pl.DataFrame({"hour_utc": list(b.hourly_mean_position), "mean_position": list(b.hourly_mean_position.values()),
                  "bars": [b.hourly_bars[h] for h in b.hourly_mean_position]}).write_csv(csv)
    for path in (png, csv):
        run.log_artifact(path, "interpretability")
    run.log_metrics({f"val_share_{k}": v for k, v in b.shares.items()})
    return {
        "behaviour": image_md(png, f"{family} actions and mean position by hour"),
        "action_shares": dg.MetadataValue.json({k: round(v, 4) for k, v in b.shares.items()}),
    }
