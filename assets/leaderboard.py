"""The leaderboard: every model and baseline side by side on one walk-forward protocol;
champion / challenger promotion through the MLflow registry alias ``champion`` by the paired
rule of ``models.evaluation.promotion`` (paired Sharpe tests on the same test bars and the
Model Confidence Set)."""

import dagster as dg

from assets.common import OWNERS, code_version_of
from assets.common.champions import (
    LeaderboardConfig,
    current_champions,
    oracle_sharpe,
    paired_comparison,
)
from assets.ensemble import ensemble_evaluation
from assets.evaluation import (
    dqn_evaluation,
    lightgbm_evaluation,
    mamba2_evaluation,
    ppo_evaluation,
    tft_evaluation,
)
from foxhunt_pipeline.synthetic.oracle_reference import oracle_reference
from models.evaluation.compared import baseline_candidates
from models.evaluation.leaderboard import rows_on_protocol
from models.evaluation.leaderboard_report import (
    champion_headline,
    champion_label,
    evaluation_dicts,
    leaderboard_text,
    paired_cells,
)
from models.evaluation.paired import PairedComparison
from models.evaluation.promotion import Decision, candidate_key, decide_scopes
from resources.champion import CHAMPION_ALIAS
from resources.champion_registry import champion_refs, demote_decayed, demoted_versions, promote
from resources.mlflow_tracking import MLflowResource
from resources.storage import EVALUATIONS_TABLE, FoxhuntStorage


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
    champions, refused, notes = current_champions(context, storage, mlflow, config, refs,
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
        comparison, why_not = paired_comparison(storage, protocol, candidates, holders, naive, config)
        if comparison is None:
            return None, {s: Decision(False, None, why_not, s, "bars")
                          for s in [*present, "overall"]}
        return comparison, decide_scopes(candidates, comparison,
                                         [b for b in naive if b in comparison.names],
                                         holders, refused)

    comparison, decisions = decide()
    lines = promote(context, mlflow, decisions, refs, overall_family, present)
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
        lines += promote(context, mlflow, decisions, refs, overall_family, present)
    lines += [f"- demoted earlier, not a candidate: {k}: {why}" for k, why in earlier.items()]
    compared = rows + list(baselines.values())
    paired_cells(compared, comparison, champions.get("overall"), naive)
    oracle, oracle_line = oracle_reference(storage.landing_root, compared)
    headline = champion_headline(decisions.get("overall"), champions.get("overall"))
    text = leaderboard_text(protocol, rows, compared, comparison, oracle, oracle_line,
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
            "champion": champion_label(overall, champions.get("overall")),
            "mcs": ", ".join(sorted(comparison.mcs_included)) if comparison else "-",
            "models": dg.MetadataValue.int(len(rows)),
            "oracle_sharpe": oracle_sharpe(oracle),
            "path": dg.MetadataValue.path(str(out)),
        }
    )


