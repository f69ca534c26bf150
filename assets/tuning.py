"""Hyperparameter search assets (group ``tuning``): one Optuna study per family on the
validation split, trials run one after another inside the step so the step's ``gpu`` pool
slot bounds them; several workers join one study by materializing with the same
``study_name`` (the RDB storage coordinates them). The training assets read the newest
study's best parameters (``assets.common.tuned_params``). On demand only: no automation."""

import json
from pathlib import Path

import dagster as dg
import optuna

from assets.common import OWNERS, code_version_of
from assets.common.agent_configs import AGENT_CONFIGS
from assets.common.config_fields import sized
from assets.common.forecasters import current_forecasters
from assets.common.metadata_images import pngs_md
from assets.common.model_runs import load_dataset
from assets.common.training_configs import FORECASTER_CONFIGS, GPU_POOL, train_config
from foxhunt_pipeline.config import deploy_profile
from models import families
from models.agents.trading_env import EnvConfig
from models.training.loop import TrainingDivergedError
from models.tuning import objective
from models.tuning.spaces import MODEL_FIELDS, suggest
from models.tuning.study import new_study_name, open_study, redact, save_plots, summary
from resources.mlflow_tracking import MLflowResource, TrackedRun
from resources.storage import FoxhuntStorage
from resources.torch_device import TorchDevice

TRAINING_CONFIGS = {**FORECASTER_CONFIGS, **AGENT_CONFIGS}


class TuningConfig(dg.Config):
    """Trials and time budget come from the profile; ``study_name`` empty starts a new study
    (named ``FAMILY-<UTC time>``), a name joins that study (several workers, one study)."""

    n_trials: int = sized("tuning", "n_trials", 40, "Trials this step runs.")
    timeout_s: int = sized("tuning", "timeout_s", 4 * 3600,
                           "Seconds after which no new trial starts (0: no limit).")
    study_name: str = ""
    storage_url: str = ""  # empty: $FOXHUNT_OPTUNA_URL, else SQLite under FOXHUNT_HOME
    seed: int = 0
    epochs: int = sized("tuning", "epochs", 10, "Epochs per forecaster trial.")
    max_batches_per_epoch: int = sized("tuning", "max_batches_per_epoch", 0,
                                       "Cap on optimizer steps per trial epoch (0: all).")
    total_timesteps: int = sized("tuning", "total_timesteps", 50_000, "Env steps per agent trial.")


def _objective(family: str, config: TuningConfig, data, choice, observed=None):
    """``(trial, on_point) -> value`` for the family, on the validation split; an agent's
    trials observe ``observed`` (the current forecasters and their training configs)."""
    base = TRAINING_CONFIGS[family]()
    if families.family(family).kind == "forecaster":
        base_model = {k: getattr(base, k) for k in MODEL_FIELDS[family]}
        base_model.update({k: getattr(base, k) for k in ("d_state", "chunk_size") if hasattr(base, k)})
        train = train_config(base, epochs=config.epochs, max_batches_per_epoch=(
            config.max_batches_per_epoch or base.max_batches_per_epoch or None))

        def run(trial, on_point):
            params = suggest(family, trial, base.hidden)
            return params, lambda: objective.forecaster_trial(
                trial, family, data, params, base_model, train, device=choice.device,
                autocast_dtype=choice.autocast_dtype, on_epoch_end=on_point)
        return run, "epoch"

    fields = base.model_dump(exclude={"use_tuned"})
    env = EnvConfig(cost_multiplier=fields.pop("cost_multiplier"))
    steps = config.total_timesteps
    fields.update(total_timesteps=steps, eval_freq=max(1, steps // 4), device=str(choice.device), env=env)

    def run(trial, on_point):
        params = suggest(family, trial)
        return params, lambda: objective.agent_trial(trial, family, data, params, fields,
                                                     on_eval=on_point, observed=observed)
    return run, "timesteps"


def tune_asset(context: dg.AssetExecutionContext, family: str, config: TuningConfig,
               storage: FoxhuntStorage, mlflow: MLflowResource, torch_device: TorchDevice,
               ) -> dg.MaterializeResult:
    """Shared by the four tuning assets: open (or join) the family's study, run this step's
    trials as MLflow child runs of the study's run, and report the best parameters."""
    data = load_dataset(storage)
    choice = torch_device.choose()
    url = config.storage_url or storage.paths.optuna_storage_url
    name = config.study_name or new_study_name(family)
    # a new study is reproducible; workers joining one must not all propose the same trials
    study = open_study(url, name, family, seed=None if config.study_name else config.seed,
                       attrs={"feature_hash": data.meta["feature_hash"],
                              "dagster_run_id": context.run.run_id})
    observed = None
    if families.family(family).kind == "agent":
        models, train_configs, _ = current_forecasters(storage, data, choice.device, context.log)
        observed = (models, train_configs)
    run_trial, step_key = _objective(family, config, data, choice, observed)
    before = len(study.trials)
    with mlflow.start_run(f"{family}-study-{name}", tags={
            "family": family, "optuna_study": name, "optuna_storage": redact(url),
            "dagster_run_id": context.run.run_id}) as parent:
        parent.log_params({"tuning": config.model_dump(exclude={"storage_url"}), "device": choice.name,
                           "feature_hash": data.meta["feature_hash"], "direction": study.direction.name})

        def trial_objective(trial: optuna.Trial) -> float:
            return _trial_as_child_run(trial, family, name, parent, mlflow, run_trial, step_key, context)

        study.optimize(trial_objective, n_trials=config.n_trials, timeout=config.timeout_s or None,
                       catch=(TrainingDivergedError, ValueError), gc_after_trial=True)
        info, plots = _study_results(study, name, url, parent, storage)
        parent_id = parent.run_id
    return dg.MaterializeResult(metadata={
        "study": name,
        "storage": redact(url),
        "objective": f"{study.direction.name.lower()} validation "
                     f"{'pinball loss' if step_key == 'epoch' else 'mean reward'}",
        "trials_this_run": dg.MetadataValue.int(len(study.trials) - before),
        **_summary_metadata(info),
        "plots": dg.MetadataValue.md(pngs_md(plots)),
        "mlflow_run_id": parent_id,
        "mlflow_run": dg.MetadataValue.url(mlflow.run_url(parent_id)),
    })


def _study_results(study: optuna.Study, name: str, url: str, parent: TrackedRun,
                   storage: FoxhuntStorage) -> tuple[dict, dict[str, Path]]:
    """The study's summary and plots, logged to its MLflow run; a failure when no trial of
    the study completed."""
    info = summary(study)
    if "best_params" not in info:
        raise dg.Failure(f"study {name} in {redact(url)} has no completed trial: {info}")
    plots = save_plots(study, storage.scratch / "tuning" / name)
    for path in plots.values():
        parent.log_artifact(path, "plots")
    parent.log_params({"best": info["best_params"]})
    parent.log_metrics({"best_value": info["best_value"], "n_trials": info["n_trials"],
                        "n_pruned": info["n_pruned"], "n_complete": info["n_complete"]})
    return info, plots


def _summary_metadata(info: dict) -> dict:
    """The study's trial counts and best trial, for the asset's metadata."""
    return {
        "trials_in_study": dg.MetadataValue.int(info["n_trials"]),
        "complete": dg.MetadataValue.int(info["n_complete"]),
        "pruned": dg.MetadataValue.int(info["n_pruned"]),
        "failed": dg.MetadataValue.int(info["n_fail"]),
        "best_value": float(info["best_value"]),
        "best_trial": dg.MetadataValue.int(info["best_trial"]),
        "best_params": dg.MetadataValue.json(info["best_params"]),
    }


def _trial_as_child_run(trial, family: str, study: str, parent: TrackedRun, mlflow: MLflowResource,
                        run_trial, step_key: str, context) -> float:
    """One trial as an MLflow child run of the study's run: its params, its curve (one
    point per epoch or evaluation), its state and value."""
    pruned: optuna.TrialPruned | None = None
    with mlflow.start_run(f"{study}-trial-{trial.number}", tags={
            "mlflow.parentRunId": parent.run_id, "family": family, "optuna_study": study,
            "optuna_trial": str(trial.number)}) as child:
        def on_point(point: dict) -> None:
            child.log_metrics({k: v for k, v in point.items() if k != step_key}, step=int(point[step_key]))

        params, fit = run_trial(trial, on_point)
        child.log_params(params)
        try:
            value = fit()
        except optuna.TrialPruned as e:
            child.set_tags({"optuna_state": "PRUNED"})
            pruned = e
        else:
            child.log_metrics({"objective": value})
            child.set_tags({"optuna_state": "COMPLETE"})
    if pruned is not None:
        context.log.info(f"{study} trial {trial.number} pruned: {pruned}")
        raise pruned
    context.log.info(f"{study} trial {trial.number}: {value:.6g} with {json.dumps(params)}")
    return value


def _tuning_asset(family: str, training_asset: str):
    @dg.asset(
        name=f"{family}_tuning",
        deps=["training_dataset"],
        group_name="tuning",
        kinds={"optuna", "mlflow"},
        owners=OWNERS,
        pool=GPU_POOL,
        op_tags=deploy_profile.training_op_tags(),
        code_version=code_version_of("models.tuning.spaces", "models.tuning.objective", "models.tuning.study"),
        description=f"Optuna study (TPE, median pruning) of {training_asset}'s hyperparameters on the "
        f"validation split; {training_asset} then trains with the newest study's best parameters.",
    )
    def _asset(context: dg.AssetExecutionContext, config: TuningConfig, storage: FoxhuntStorage,
               mlflow: MLflowResource, torch_device: TorchDevice) -> dg.MaterializeResult:
        return tune_asset(context, family, config, storage, mlflow, torch_device)

    return _asset


tft_tuning = _tuning_asset("tft", "tft_model")
mamba2_tuning = _tuning_asset("mamba2", "mamba2_model")
dqn_tuning = _tuning_asset("dqn", "dqn_agent")
ppo_tuning = _tuning_asset("ppo", "ppo_agent")
