"""The leaderboard: every model and baseline side by side on one walk-forward protocol;
champion / challenger promotion through the MLflow registry alias ``champion``."""

import json
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import polars as pl
from mlflow.artifacts import download_artifacts
from mlflow.exceptions import MlflowException

from assets.common import OWNERS, code_version_of
from assets.ensemble import ensemble_evaluation
from assets.evaluation import (
    EVALUATIONS_TABLE,
    EvaluationConfig,
    dqn_evaluation,
    evaluation_rows,
    logged_config,
    mamba2_evaluation,
    ppo_evaluation,
    run_walk_forward,
    tft_evaluation,
)
from assets.training import load_dataset
from foxhunt_pipeline.storage import model_store
from foxhunt_pipeline.synthetic.oracle_reference import oracle_reference
from models.evaluation.leaderboard import (
    Decision,
    champion_on_protocol,
    choose_champions,
    leaderboard_markdown,
    rows_on_protocol,
    verdict,
)
from resources.mlflow_tracking import MLflowResource
from resources.storage import FoxhuntStorage

CHAMPION_ALIAS = "champion"
OVERALL_TAG = "foxhunt.overall_champion"


class LeaderboardConfig(dg.Config):
    """Promotion rule: ``metric`` (any column of model_evaluations), its direction, and the
    challenger's value that must beat the champion and the baselines (default: its Sharpe CI
    lower bound, at the Bonferroni-adjusted level of the protocol)."""

    metric: str = "sharpe"
    higher_is_better: bool = True
    challenger_key: str = "sharpe_ci_low"
    min_improvement: float = 0.0
    rescore_champions: bool = True  # re-score a champion that has no row on the protocol


def _fp32(evaluations: pl.DataFrame) -> pl.DataFrame:
    if evaluations.is_empty() or "precision" not in evaluations.columns:
        return evaluations
    return evaluations.filter(pl.col("precision") == "fp32")


def _row(r: dict) -> dict:
    out = {k: v for k, v in r.items() if k != "metrics_json"}
    for k, v in json.loads(r.get("metrics_json") or "{}").items():
        out.setdefault(k, v)
    out["evaluated_at"] = str(out.get("evaluated_at") or "")
    return out


def evaluation_dicts(evaluations: pl.DataFrame) -> list[dict]:
    """fp32 rows as dicts; rows written before walk-forward (no ``fold``) are left out."""
    df = _fp32(evaluations)
    if df.is_empty() or "fold" not in df.columns or "protocol_id" not in df.columns:
        return []
    return [_row(r) for r in df.iter_rows(named=True)]


def _oracle_sharpe(oracle: dict | None) -> dg.MetadataValue:
    """The oracle's pooled Sharpe after costs, "-" when undefined or there is no oracle."""
    v = None if oracle is None else oracle.get("sharpe")
    return dg.MetadataValue.float(float(v)) if v is not None else dg.MetadataValue.text("-")


def champion_refs(mlflow: MLflowResource, families: list[str],
                  log: Callable[[str], None] | None = None) -> tuple[dict[str, dict], str | None]:
    """Per family the version holding the alias ``champion`` (absent: none), and the family
    tagged overall champion. ``log`` hears why a lookup failed (by default Dagster's logger)."""
    log = log or dg.get_dagster_logger().warning
    client = mlflow.client()
    refs, overall = {}, None
    for family in families:
        name = model_store.REGISTERED_NAMES[family]
        try:
            mv = client.get_model_version_by_alias(name, CHAMPION_ALIAS)
        except MlflowException as e:  # no alias (or no registered model) yet: no champion
            log(f"{name}: no {CHAMPION_ALIAS} ({e.error_code}: {e.message})")
            continue
        refs[family] = {"family": family, "model": name, "version": str(mv.version),
                        "run_id": mv.run_id}
        try:
            if client.get_registered_model(name).tags.get(OVERALL_TAG) == "true":
                overall = family
        except MlflowException as e:
            log(f"{name}: its {OVERALL_TAG} tag could not be read ({e.error_code}: {e.message})")
    return refs, overall


def rescore_champion(context: dg.AssetExecutionContext, storage: FoxhuntStorage,
                     mlflow: MLflowResource, champion: dict) -> list[dict]:
    """Evaluate the champion's registered artifact under today's walk-forward protocol (its
    configuration retrained on each fold, as every evaluation does); returns the new rows."""
    family = champion["family"]
    config = EvaluationConfig()
    with tempfile.TemporaryDirectory(dir=storage.scratch) as tmp:
        ckpt = Path(download_artifacts(run_id=champion["run_id"], artifact_path="checkpoint",
                                       dst_path=tmp, tracking_uri=mlflow.resolved_uri()))
        # an ensemble champion is retrained from today's member forecasters' configurations
        result = run_walk_forward(family, ckpt, load_dataset(storage), config, "cpu",
                                  context.log.info,
                                  logged_config(family, storage, mlflow, champion["run_id"], ckpt))
    rows = evaluation_rows(family, champion["version"], "fp32", result, context.run.run_id,
                           datetime.now(UTC))
    storage.append_rows(EVALUATIONS_TABLE, rows, f"{family}-rescore-{context.run.run_id}")
    return [_row(r) for r in rows.iter_rows(named=True)]


@dg.asset(
    deps=[tft_evaluation, mamba2_evaluation, dqn_evaluation, ppo_evaluation, ensemble_evaluation],
    group_name="evaluation",
    kinds={"duckdb", "mlflow"},
    owners=OWNERS,
    code_version=code_version_of("models.evaluation.leaderboard",
                                 "foxhunt_pipeline.synthetic.oracle_reference"),
    automation_condition=dg.AutomationCondition.eager(),
    description="All models and baselines side by side on one walk-forward protocol (same "
    "folds, data and costs); sets the MLflow alias `champion` per family and overall only when "
    "the challenger's Sharpe CI lower bound beats the current champion (re-scored on this "
    "protocol when needed) and every baseline, LightGBM included, and says why not otherwise. "
    "On generated data the row `oracle` (the generator's oracle over the same test dates) is "
    "shown as a reference, never compared.",
)
def model_leaderboard(context: dg.AssetExecutionContext, config: LeaderboardConfig,
                      storage: FoxhuntStorage, mlflow: MLflowResource) -> dg.MaterializeResult:
    evaluations = evaluation_dicts(storage.read_rows(EVALUATIONS_TABLE))
    protocol, rows, baselines, elsewhere = rows_on_protocol(evaluations)
    if not rows:
        raise dg.Failure(f"no walk-forward model evaluations in "
                         f"{storage.evaluations_location(EVALUATIONS_TABLE)}: materialize the "
                         "evaluations first")
    families = sorted({r["family"] for r in rows})
    refs, overall_family = champion_refs(mlflow, families, context.log.warning)
    champions, refused, notes = _current_champions(context, storage, mlflow, config, refs,
                                                   evaluations, protocol)
    if overall_family is not None:
        champions["overall"] = champions.get(overall_family)
        if overall_family in refused:
            refused["overall"] = refused[overall_family]
    decisions = choose_champions(
        rows, config.metric, config.higher_is_better, champions, baselines,
        min_improvement=config.min_improvement, challenger_key=config.challenger_key or None,
        refused=refused,
    )
    lines = _promote(context, mlflow, decisions, refs, overall_family, families)
    compared = rows + list(baselines.values())
    oracle, oracle_line = oracle_reference(storage.landing_root, compared)
    text = _leaderboard_text(config, protocol, rows, compared, oracle, oracle_line, lines + notes,
                             elsewhere)
    out = storage.warehouse_root / "model_leaderboard" / "leaderboard.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    return dg.MaterializeResult(
        metadata={
            "leaderboard": dg.MetadataValue.md(text),
            "protocol_id": protocol,
            "promoted": ", ".join(s for s, d in decisions.items() if d.promote) or "none",
            "models": dg.MetadataValue.int(len(rows)),
            "oracle_sharpe": _oracle_sharpe(oracle),
            "path": dg.MetadataValue.path(str(out)),
        }
    )


def _current_champions(context: dg.AssetExecutionContext, storage: FoxhuntStorage,
                       mlflow: MLflowResource, config: LeaderboardConfig, refs: dict[str, dict],
                       evaluations: list[dict], protocol: str
                       ) -> tuple[dict[str, dict | None], dict[str, str], list[str]]:
    """Per family its champion's row on ``protocol`` (re-scored when it has none and the
    Config allows), why a comparison was refused, and a note per re-scored champion."""
    champions: dict[str, dict | None] = {}
    refused: dict[str, str] = {}
    notes = []

    def rescore(champ: dict) -> list[dict]:
        return rescore_champion(context, storage, mlflow, champ)

    for family, ref in refs.items():
        row, how = champion_on_protocol(ref, evaluations, protocol,
                                        rescore if config.rescore_champions else None)
        champions[family] = row
        if row is None:
            refused[family] = how
        elif how == "re-scored":
            notes.append(f"- champion {ref['model']} v{ref['version']} was re-scored on this "
                         "protocol before the comparison")
    return champions, refused, notes


def _promote(context: dg.AssetExecutionContext, mlflow: MLflowResource,
             decisions: dict[str, Decision], refs: dict[str, dict], overall_family: str | None,
             families: list[str]) -> list[str]:
    """Move the ``champion`` alias (and the overall tag) as decided; one line per decision."""
    client = mlflow.client()
    lines = []
    for scope, d in sorted(decisions.items()):
        has = (overall_family is not None) if scope == "overall" else scope in refs
        lines.append(f"- **{scope}**: {verdict(d, has)}: {d.reason}")
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
    return lines


def _leaderboard_text(config: LeaderboardConfig, protocol: str, rows: list[dict],
                      compared: list[dict], oracle: dict | None, oracle_line: str,
                      decision_lines: list[str], elsewhere: list[dict]) -> str:
    """The leaderboard as markdown: the table, the oracle line, the decisions and the rows
    evaluated on another protocol."""
    table = leaderboard_markdown(compared, config.metric, config.higher_is_better,
                                 references=[oracle] if oracle else [])
    level = next((r.get("ci_level") for r in rows if r.get("ci_level") is not None), None)
    head = (f"## Leaderboard (by {config.metric}; promotion on the challenger's "
            f"{config.challenger_key or config.metric})\n\nProtocol `{protocol}`: pooled over "
            "the walk-forward test folds; CI bounds at the Bonferroni-adjusted level "
            f"{'-' if level is None else f'{float(level):.4f}'}; '-' = undefined.")
    text = (f"{head}\n\n{table}\n\n{oracle_line}\n\n### Champion decisions\n\n"
            + "\n".join(decision_lines))
    if elsewhere:
        text += "\n\n### Not compared (evaluated on another protocol)\n\n" + "\n".join(
            f"- {r['model']} v{r.get('version')}: protocol `{r['protocol_id']}`" for r in elsewhere)
    return text
