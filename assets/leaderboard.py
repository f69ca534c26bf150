"""The leaderboard: every model and baseline side by side on one walk-forward protocol;
champion / challenger promotion through the MLflow registry alias ``champion`` by the paired
rule of ``models.evaluation.promotion`` (paired Sharpe tests on the same test bars and the
Model Confidence Set)."""

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
    BARS_TABLE,
    EVALUATIONS_TABLE,
    EvaluationConfig,
    baseline_candidates,
    dqn_evaluation,
    evaluation_rows,
    lightgbm_evaluation,
    mamba2_evaluation,
    ppo_evaluation,
    production_settings,
    run_walk_forward,
    store_bars,
    tft_evaluation,
)
from assets.training import load_dataset
from foxhunt_pipeline.synthetic.oracle_reference import oracle_reference
from models import families
from models.agents import forecast_memo
from models.evaluation.leaderboard import (
    champion_on_protocol,
    leaderboard_markdown,
    rows_on_protocol,
)
from models.evaluation.paired import (
    Bars,
    PairedComparison,
    PairedComparisonError,
    aligned_pnl,
    compare,
    family_wise_level,
)
from models.evaluation.promotion import (
    Decision,
    candidate_key,
    decide_scopes,
    n_paired_tests,
    verdict,
)
from resources.champion import CHAMPION_ALIAS, DECAY_TAG, DEMOTED_TAG, OVERALL_TAG
from resources.mlflow_tracking import MLflowResource
from resources.storage import FoxhuntStorage


class LeaderboardConfig(dg.Config):
    """The promotion rule's parameters (``models.evaluation.promotion``): the family-wise
    error of the paired tests, the bootstrap, and whether a champion without a row on the
    protocol is re-scored."""

    alpha: float = 0.05  # family-wise error over every paired test of the table
    resamples: int = 1000  # stationary-bootstrap resamples of the paired tests and the MCS
    seed: int = 0
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


def _no_such_alias(e: MlflowException) -> bool:
    """What MLflow answers for a registered model without the alias, or without versions."""
    return e.error_code == "RESOURCE_DOES_NOT_EXIST" or "not found" in str(e.message).lower()


def champion_refs(mlflow: MLflowResource, names: list[str],
                  log: Callable[[str], None] | None = None) -> tuple[dict[str, dict], str | None]:
    """Per family the version holding the alias ``champion`` (absent: none), and the family
    tagged overall champion. A family without a champion is the normal state of a new home:
    the leaderboard says so once; ``log`` hears only lookups that failed otherwise."""
    log = log or dg.get_dagster_logger().warning
    client = mlflow.client()
    refs, overall = {}, None
    for family in names:
        name = families.family(family).registered_name
        try:
            mv = client.get_model_version_by_alias(name, CHAMPION_ALIAS)
        except MlflowException as e:  # no alias (or no registered model) yet: no champion
            if not _no_such_alias(e):
                log(f"{name}: its {CHAMPION_ALIAS} could not be read ({e.error_code}: {e.message})")
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
        settings = production_settings(family, storage, mlflow, champion["run_id"], ckpt, "cpu")
        with forecast_memo.on_disk(storage.forecast_cache):
            result = run_walk_forward(family, ckpt, load_dataset(storage), config, "cpu",
                                      context.log.info, settings,
                                      cache_dir=storage.fold_model_cache)
    rows = evaluation_rows(family, champion["version"], "fp32", result, context.run.run_id,
                           datetime.now(UTC))
    part = f"{family}-rescore-{context.run.run_id}"
    storage.append_rows(EVALUATIONS_TABLE, rows, part)
    store_bars(storage, result, champion["version"], part)
    return [_row(r) for r in rows.iter_rows(named=True)]


@dg.asset(
    deps=[tft_evaluation, mamba2_evaluation, lightgbm_evaluation, dqn_evaluation,
          ppo_evaluation, ensemble_evaluation],
    group_name="evaluation",
    kinds={"duckdb", "mlflow"},
    owners=OWNERS,
    code_version=code_version_of("models.evaluation.leaderboard", "models.evaluation.promotion",
                                 "models.evaluation.paired",
                                 "foxhunt_pipeline.synthetic.oracle_reference"),
    automation_condition=dg.AutomationCondition.eager(),
    description="All models and baselines side by side on one walk-forward protocol (same "
    "folds, bars and costs), compared paired on the same test bars: each model's Sharpe "
    "difference to every naive baseline and to the champion with block-bootstrap CIs, and a "
    "Model Confidence Set. Sets the MLflow alias `champion` per family and overall when a "
    "challenger beats every baseline, is in the MCS and beats the champion (re-scored on this "
    "protocol when needed); says which test decided. On generated data the row `oracle` (the "
    "generator's oracle over the same test dates) is shown as a reference, never compared.",
)
def model_leaderboard(context: dg.AssetExecutionContext, config: LeaderboardConfig,
                      storage: FoxhuntStorage, mlflow: MLflowResource) -> dg.MaterializeResult:
    evaluations = evaluation_dicts(storage.read_rows(EVALUATIONS_TABLE))
    protocol, rows, baselines, elsewhere = rows_on_protocol(evaluations)
    if not rows:
        raise dg.Failure(f"no walk-forward model evaluations in "
                         f"{storage.evaluations_location(EVALUATIONS_TABLE)}: materialize the "
                         "evaluations first")
    present = sorted({r["family"] for r in rows})
    refs, overall_family = champion_refs(mlflow, present, context.log.warning)
    champions, refused, notes = _current_champions(context, storage, mlflow, config, refs,
                                                   evaluations, protocol)
    if overall_family is not None:
        champions["overall"] = champions.get(overall_family)
        if overall_family in refused:
            refused["overall"] = refused[overall_family]
    naive = [c.name for c in baseline_candidates()]
    # a version demoted after a decay alarm is shown but never a candidate again
    earlier = demoted_versions(mlflow, rows)
    demoted = dict(earlier)

    def decide() -> tuple[PairedComparison | None, dict[str, Decision]]:
        candidates = [r for r in rows if candidate_key(r) not in demoted]
        holders = {s: c for s, c in champions.items()
                   if c is None or candidate_key(c) not in demoted}
        comparison, why_not = _comparison(storage, protocol, candidates, holders, naive, config)
        if comparison is None:
            return None, {s: Decision(False, None, why_not, s, "bars")
                          for s in [*present, "overall"]}
        return comparison, decide_scopes(candidates, comparison,
                                         [b for b in naive if b in comparison.names],
                                         holders, refused)

    comparison, decisions = decide()
    lines = _promote(context, mlflow, decisions, refs, overall_family, present)
    demotion = demote_decayed(mlflow, decisions, refs, overall_family, rows)
    if demotion is not None:  # the retrained models did not replace a decayed champion
        decayed, why = demotion
        gone = candidate_key(refs[decayed])
        lines.append(f"- **demoted** {gone} (alias `{CHAMPION_ALIAS}` removed; never champion "
                     f"again): {why}; decided again without it:")
        demoted[gone] = why
        champions = {s: c for s, c in champions.items() if c is None or candidate_key(c) != gone}
        if decayed == overall_family:
            overall_family = None
        refs = {f: r for f, r in refs.items() if f != decayed}
        comparison, decisions = decide()
        lines += _promote(context, mlflow, decisions, refs, overall_family, present)
    lines += [f"- demoted earlier, not a candidate: {k}: {why}" for k, why in earlier.items()]
    compared = rows + list(baselines.values())
    _paired_cells(compared, comparison, champions.get("overall"), naive)
    oracle, oracle_line = oracle_reference(storage.landing_root, compared)
    headline = _headline(decisions.get("overall"), champions.get("overall"))
    text = _leaderboard_text(protocol, rows, compared, comparison, oracle, oracle_line,
                             [headline, "", *lines, *notes], elsewhere)
    out = storage.warehouse_root / "model_leaderboard" / "leaderboard.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    overall = decisions.get("overall")
    return dg.MaterializeResult(
        metadata={
            "leaderboard": dg.MetadataValue.md(text),
            "protocol_id": protocol,
            "promoted": ", ".join(s for s, d in decisions.items() if d.promote) or "none",
            "champion": _champion_label(overall, champions.get("overall")),
            "mcs": ", ".join(sorted(comparison.mcs_included)) if comparison else "-",
            "models": dg.MetadataValue.int(len(rows)),
            "oracle_sharpe": _oracle_sharpe(oracle),
            "path": dg.MetadataValue.path(str(out)),
        }
    )


def demoted_versions(mlflow: MLflowResource, rows: list[dict]) -> dict[str, str]:
    """The rows' model versions tagged ``foxhunt.demoted`` (a decay alarm the retraining did
    not cure) and why; they are shown but never champion again."""
    client = mlflow.client()
    out = {}
    for r in rows:
        try:
            tags = client.get_model_version(r["model"], str(r["version"])).tags or {}
        except MlflowException:
            continue
        if tags.get(DEMOTED_TAG):
            out[candidate_key(r)] = tags[DEMOTED_TAG]
    return out


def demote_decayed(mlflow: MLflowResource, decisions: dict[str, Decision], refs: dict[str, dict],
                   overall_family: str | None, rows: list[dict]) -> tuple[str, str] | None:
    """``(family, why)`` when the overall champion that kept its alias in this run carries a
    decay alarm and every family on the table was evaluated again since the alarm (the
    retraining it asked for is done): its alias and overall tag are removed and the reason
    tagged on its version. None otherwise."""
    overall = decisions.get("overall")
    if overall_family is None or (overall is not None and overall.promote):
        return None  # no champion, or a retrained challenger replaced it
    ref = refs.get(overall_family)
    client = mlflow.client()
    tags = client.get_model_version(ref["model"], ref["version"]).tags or {}
    if not tags.get(DECAY_TAG) or tags.get(DEMOTED_TAG):
        return None
    alarm = json.loads(tags[DECAY_TAG])
    raised = datetime.fromisoformat(alarm["raised_at"])
    newest: dict[str, datetime] = {}
    for r in rows:
        at = datetime.fromisoformat(str(r["evaluated_at"]).replace(" ", "T"))
        at = at if at.tzinfo else at.replace(tzinfo=UTC)
        newest[r["family"]] = max(at, newest.get(r["family"], at))
    if not newest or min(newest.values()) <= raised:
        return None  # the retraining has not reached every family yet
    why = (f"live P&L decayed ({alarm.get('message', 'live_pnl_decay failed')}, trade date "
           f"{alarm.get('trade_date')}) and the models retrained since did not replace it")
    client.set_model_version_tag(ref["model"], ref["version"], DEMOTED_TAG, why)
    client.delete_registered_model_alias(ref["model"], CHAMPION_ALIAS)
    client.set_registered_model_tag(ref["model"], OVERALL_TAG, "false")
    return overall_family, why


def _headline(decision: Decision | None, champion: dict | None) -> str:
    """One line on the overall champion after this run, and how to use it (or why none)."""
    if decision is not None and decision.promote and decision.winner is not None:
        w = decision.winner
    elif champion:
        w = champion
    else:
        why = decision.reason if decision is not None else "no decision"
        return f"**No overall champion yet**: {why}."
    name = families.family(w["family"]).registered_name
    return (f"**Overall champion: {name} v{w['version']}**. Forecast with it: "
            f"`foxhunt predict models:/{name}@champion --root <ROOT>`.")


def _champion_label(decision: Decision | None, champion: dict | None) -> str:
    """The overall champion after this run: the promoted one, else the one that holds."""
    if decision is not None and decision.promote and decision.winner is not None:
        return candidate_key(decision.winner)
    return candidate_key(champion) if champion else "none yet"


def protocol_bars(storage: FoxhuntStorage, protocol: str) -> tuple[dict[str, Bars], float]:
    """Every candidate's stored test bars on ``protocol`` by ``candidate_key`` (a version
    scored twice keeps one copy of each bar), and the bars per year they annualise with."""
    frame = storage.read_parts(f"{BARS_TABLE}/{protocol}")
    if frame.is_empty():
        return {}, float("nan")
    frame = frame.unique(["model", "version", "root", "ts_event"], keep="last",
                         maintain_order=True)
    out = {}
    for (model, version), part in frame.group_by(["model", "version"], maintain_order=True):
        key = candidate_key({"model": model, "version": version})
        out[key] = Bars(part["root"].to_numpy(), part["ts_event"].dt.epoch("ns").to_numpy(),
                        part["pnl"].to_numpy())
    return out, float(frame["bars_per_year"][0])


def _comparison(storage: FoxhuntStorage, protocol: str, rows: list[dict],
                champions: dict[str, dict | None], naive: list[str], config: LeaderboardConfig
                ) -> tuple[PairedComparison | None, str]:
    """The paired comparison of the rows, their champions and the naive baselines on the
    protocol's test bars; ``(None, why)`` when the bars are not there."""
    bars, bars_per_year = protocol_bars(storage, protocol)
    wanted = [candidate_key(r) for r in rows]
    wanted += [candidate_key(c) for c in champions.values() if c is not None]
    wanted += [b for b in naive if b in bars]
    missing = sorted({k for k in wanted if k not in bars})
    if not bars or len(missing) == len(set(wanted)):
        return None, (f"no test bars stored for protocol {protocol} (evaluated before paired "
                      "comparisons): re-materialize the evaluations")
    try:
        pnl = aligned_pnl({k: bars[k] for k in dict.fromkeys(wanted) if k in bars})
    except PairedComparisonError as e:
        return None, f"paired comparison refused: {e}"
    level = family_wise_level(n_paired_tests(len(rows), len([b for b in naive if b in bars])),
                              config.alpha)
    return compare(pnl, bars_per_year, level=level, resamples=config.resamples,
                   seed=config.seed), ""


def _paired_cells(rows: list[dict], comparison: PairedComparison | None,
                  champion: dict | None, naive: list[str]) -> None:
    """Per row, its paired Sharpe difference to the champion and to the best naive baseline
    (with CIs) and its MCS membership, as the table's text cells."""
    if comparison is None:
        return
    present = [b for b in naive if b in comparison.names]
    best = max(present, key=lambda b: comparison.sharpe[b]) if present else None
    champ = candidate_key(champion) if champion else None
    for r in rows:
        key = candidate_key(r)
        if key not in comparison.names:
            continue
        r["mcs"] = "yes" if comparison.in_mcs(key) else (
            f"no (p {comparison.mcs_pvalues.get(key, float('nan')):.2g})")
        if champ in comparison.names and key != champ:
            r["vs_champion"] = comparison.diff(key, champ).describe()
        if best is not None and key != best:
            r["vs_best_baseline"] = comparison.diff(key, best).describe()


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
             present: list[str]) -> list[str]:
    """Move the ``champion`` alias (and the overall tag) as decided; one line per decision
    naming the test that decided it."""
    client = mlflow.client()
    lines = []
    for scope, d in sorted(decisions.items()):
        has = (overall_family is not None) if scope == "overall" else scope in refs
        lines.append(f"- **{scope}**: {verdict(d, has)} ({d.test or '-'}): {d.reason}")
        if not d.promote or d.winner is None:
            continue
        family = d.winner["family"]
        name = families.family(family).registered_name
        if scope == "overall":
            for other in present:
                client.set_registered_model_tag(families.family(other).registered_name,
                                                OVERALL_TAG,
                                                "true" if other == family else "false")
        client.set_registered_model_alias(name, CHAMPION_ALIAS, str(d.winner["version"]))
        context.log.info(f"{scope}: {name} v{d.winner['version']} is now {CHAMPION_ALIAS}")
    return lines


PAIRED_COLUMNS = ("vs_champion", "vs_best_baseline", "mcs")


def _leaderboard_text(protocol: str, rows: list[dict], compared: list[dict],
                      comparison: PairedComparison | None, oracle: dict | None, oracle_line: str,
                      decision_lines: list[str], elsewhere: list[dict]) -> str:
    """The leaderboard as markdown: the table, the oracle line, the decisions and the rows
    evaluated on another protocol."""
    table = leaderboard_markdown(compared, "sharpe", True,
                                 references=[oracle] if oracle else [],
                                 text_columns=PAIRED_COLUMNS if comparison else ())
    level = next((r.get("ci_level") for r in rows if r.get("ci_level") is not None), None)
    paired = ("" if comparison is None else
              f" Paired Sharpe differences (vs_champion, vs_best_baseline) over "
              f"{comparison.n_bars} test bars, stationary bootstrap (block "
              f"{comparison.block_length:.1f} bars), CIs at the family-wise level "
              f"{comparison.level:.4f}; mcs: in the 90% Model Confidence Set on per-bar "
              "losses (-P&L).")
    head = ("## Leaderboard (by Sharpe; promotion by the paired rule)\n\n"
            f"Protocol `{protocol}`: pooled over the walk-forward test folds; sharpe_ci_low at "
            f"the Bonferroni-adjusted level {'-' if level is None else f'{float(level):.4f}'}; "
            f"'-' = undefined.{paired}")
    text = (f"{head}\n\n{table}\n\n{oracle_line}\n\n### Champion decisions\n\n"
            + "\n".join(decision_lines))
    if elsewhere:
        text += "\n\n### Not compared (evaluated on another protocol)\n\n" + "\n".join(
            f"- {r['model']} v{r.get('version')}: protocol `{r['protocol_id']}`" for r in elsewhere)
    return text
