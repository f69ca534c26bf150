"""What a family's walk-forward retrains per fold with that its checkpoint may not carry
(``models.evaluation.family_candidates``): a forecaster's ``TrainConfig`` (logged to MLflow
by older trainings), an agent's config, the ensemble's current members."""

from pathlib import Path

from assets.common.agent_configs import AGENT_CONFIGS, agent_config
from assets.common.training_configs import logged_train_config
from models import families
from models.agents.saved_config import saved_agent_config
from models.agents.trading_env import EnvConfig
from models.training.checkpoint import read_checkpoint_meta
from models.training.saved_train_config import saved_train_config
from resources.logged_params import training_params
from resources.mlflow_tracking import MLflowResource
from resources.storage import FoxhuntStorage


def production_settings(family: str, storage: FoxhuntStorage, mlflow: MLflowResource,
                        run_id: str, checkpoint: Path, device: str):
    """What the family's walk-forward retrains per fold with that its checkpoint may not
    carry (``models.evaluation.family_candidates``): a forecaster's ``TrainConfig`` (logged to
    MLflow by older trainings), an agent's config, the ensemble's current members."""
    fam = families.family(family)
    if fam.combines:
        return ensemble_members(storage, mlflow, checkpoint)
    if fam.kind == "agent":
        return _agent_settings(family, mlflow, run_id, checkpoint, device)
    if fam.logged_params and saved_train_config(checkpoint) is None:
        return logged_train_config(family, training_params(mlflow, run_id, fam.logged_params))
    return None


def _agent_settings(family: str, mlflow: MLflowResource, run_id: str | None,
                    checkpoint: Path | None, device: str):
    """The agent's config as its training saved (or, before configs were saved, logged) it;
    the asset Config's defaults when neither is there."""
    fam = families.family(family)
    logged = saved_agent_config(checkpoint) if checkpoint else None
    if logged is None and run_id:
        logged = training_params(mlflow, run_id, fam.logged_params)
    if not logged:
        return agent_config(family, AGENT_CONFIGS[family](), device)
    logged = dict(logged)
    if isinstance(logged.get("env"), dict):
        logged["env"] = EnvConfig(**logged["env"])
    return fam.config_class().from_dict({**logged, "device": device})


def ensemble_members(storage: FoxhuntStorage, mlflow: MLflowResource, checkpoint: Path) -> dict:
    """What the ensemble's walk-forward retrains per fold: the current member forecasters with
    their training configs (logged ones only for checkpoints that carry none), and whether
    the climatology is a member (its weights)."""
    meta = read_checkpoint_meta(checkpoint)
    weights = dict(meta.get("extra", meta).get("weights") or {})
    members = {}
    for member in families.family("ensemble").members:
        if weights and member not in weights:
            continue
        try:
            pointer, ckpt, _ = storage.current_model(member)
        except FileNotFoundError:
            continue
        logged = families.family(member).logged_params
        train = (None if saved_train_config(ckpt) is not None or not logged else
                 logged_train_config(member, training_params(mlflow, pointer["mlflow_run_id"],
                                                             logged)))
        members[member] = (str(ckpt), train)
    return {"members": members, "include_climatology": "climatology" in weights}
