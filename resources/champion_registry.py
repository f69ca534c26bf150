"""The champions in the MLflow registry as the leaderboard reads and moves them: the alias
``champion`` per family, the overall tag, the demotion of a decayed champion."""

import json
from collections.abc import Callable
from datetime import UTC, datetime

import dagster as dg
from mlflow.exceptions import MlflowException

from models import families
from models.evaluation.promotion import Decision, candidate_key, verdict
from resources.champion import CHAMPION_ALIAS, DECAY_TAG, DEMOTED_TAG, OVERALL_TAG
from resources.mlflow_tracking import MLflowResource


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


def promote(context: dg.AssetExecutionContext, mlflow: MLflowResource,
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
