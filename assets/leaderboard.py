"""The leaderboard: every model and baseline side by side; champion / challenger promotion
through the MLflow registry alias ``champion``."""

import json

import dagster as dg
import polars as pl

from assets.common import OWNERS, code_version_of
from assets.ensemble import ensemble_evaluation
from assets.evaluation import (
    EVALUATIONS_TABLE,
    dqn_evaluation,
    mamba2_evaluation,
    ppo_evaluation,
    tft_evaluation,
)
from foxhunt_pipeline.storage import model_store
from resources.mlflow_tracking import MLflowResource
from resources.storage import FoxhuntStorage

CHAMPION_ALIAS = "champion"
OVERALL_TAG = "foxhunt.overall_champion"


class LeaderboardConfig(dg.Config):
    """Promotion rule: ``metric`` (any column of model_evaluations), its direction, and whether
    the challenger's bootstrap lower bound must beat instead of its point value."""

    metric: str = "sharpe"
    higher_is_better: bool = True
    challenger_key: str = ""
    min_improvement: float = 0.0


def _fp32(evaluations: pl.DataFrame) -> pl.DataFrame:
    return evaluations.filter(pl.col("precision") == "fp32") if evaluations.height else evaluations


def latest_evaluations(evaluations: pl.DataFrame) -> tuple[list[dict], dict[str, dict]]:
    """Newest fp32 evaluation per family, and the baselines evaluated on the same test period."""
    df = _fp32(evaluations)
    if df.is_empty():
        return [], {}
    newest = df.sort("evaluated_at").group_by("model", maintain_order=True).last()
    models = newest.filter(pl.col("family") != "baseline")
    rows = [_row(r) for r in models.iter_rows(named=True)]
    baselines = {
        r["model"].removeprefix("baseline:"): _row(r)
        for r in newest.filter(pl.col("family") == "baseline").iter_rows(named=True)
    }
    return rows, baselines


def _row(r: dict) -> dict:
    out = {k: v for k, v in r.items() if k != "metrics_json"}
    out.update(json.loads(r.get("metrics_json") or "{}"))
    return out


def current_champions(mlflow: MLflowResource, evaluations: pl.DataFrame,
                      families: list[str]) -> dict[str, dict | None]:
    """Per family: the evaluation row of the version holding the alias; overall: the family
    tagged as overall champion."""
    client = mlflow.client()
    df = _fp32(evaluations)
    champions: dict[str, dict | None] = {}
    overall = None
    for family in families:
        name = model_store.REGISTERED_NAMES[family]
        try:
            version = client.get_model_version_by_alias(name, CHAMPION_ALIAS).version
        except Exception:
            champions[family] = None
            continue
        hit = df.filter((pl.col("family") == family) & (pl.col("version") == str(version))).sort("evaluated_at")
        champions[family] = _row(hit.row(-1, named=True)) if hit.height else None
        try:
            tags = client.get_registered_model(name).tags
        except Exception:
            tags = {}
        if tags.get(OVERALL_TAG) == "true":
            overall = champions[family]
    champions["overall"] = overall
    return champions


@dg.asset(
    deps=[tft_evaluation, mamba2_evaluation, dqn_evaluation, ppo_evaluation, ensemble_evaluation],
    group_name="evaluation",
    kinds={"duckdb", "mlflow"},
    owners=OWNERS,
    code_version=code_version_of("models.evaluation.leaderboard"),
    automation_condition=dg.AutomationCondition.eager(),
    description="All models and baselines side by side on the same test period; sets the MLflow "
    "alias `champion` per family and overall only when the challenger beats the current "
    "champion and every baseline, and says why not otherwise.",
)
def model_leaderboard(context: dg.AssetExecutionContext, config: LeaderboardConfig,
                      storage: FoxhuntStorage, mlflow: MLflowResource) -> dg.MaterializeResult:
    from models.evaluation.leaderboard import baseline_rows, choose_champions, leaderboard_markdown

    evaluations = storage.read_rows(EVALUATIONS_TABLE)
    rows, baselines = latest_evaluations(evaluations)
    if not rows:
        raise dg.Failure(f"no model evaluations in {storage.evaluations_location(EVALUATIONS_TABLE)}: "
                         "materialize the evaluations first")
    families = sorted({r["family"] for r in rows})
    champions = current_champions(mlflow, evaluations, families)
    decisions = choose_champions(
        rows, config.metric, config.higher_is_better, champions, baselines,
        min_improvement=config.min_improvement, challenger_key=config.challenger_key or None,
    )
    client = mlflow.client()
    lines = []
    for scope, d in sorted(decisions.items()):
        verdict = "PROMOTED" if d.promote else "kept"
        lines.append(f"- **{scope}**: {verdict}: {d.reason}")
        if not d.promote or d.winner is None:
            continue
        family = d.winner["family"]
        name = model_store.REGISTERED_NAMES[family]
        if scope == "overall":
            for other in families:
                client.set_registered_model_tag(model_store.REGISTERED_NAMES[other], OVERALL_TAG,
                                                "true" if other == family else "false")
        client.set_registered_model_alias(name, CHAMPION_ALIAS, str(d.winner["version"]))
        context.log.info(f"{scope}: {name} v{d.winner['version']} is now {CHAMPION_ALIAS}")
    table = leaderboard_markdown(rows + baseline_rows(baselines), config.metric, config.higher_is_better)
    text = f"## Leaderboard (by {config.metric})\n\n{table}\n\n### Champion decisions\n\n" + "\n".join(lines)
    out = storage.warehouse_root / "model_leaderboard" / "leaderboard.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    return dg.MaterializeResult(
        metadata={
            "leaderboard": dg.MetadataValue.md(text),
            "promoted": ", ".join(s for s, d in decisions.items() if d.promote) or "none",
            "models": dg.MetadataValue.int(len(rows)),
            "path": dg.MetadataValue.path(str(out)),
        }
    )
