"""The agent training assets' shared body: SB3 training with validation backtests logged to
MLflow, the safetensors policy and SB3 zip, a registered version, the pointer evaluation reads."""

import time
from collections.abc import Callable
from pathlib import Path

import dagster as dg

from assets.common import registration
from assets.common.agent_configs import AgentTrainingConfig, agent_config
from assets.common.forecasters import current_forecasters
from assets.common.interpretability import agent_behaviour
from assets.common.model_runs import load_dataset, new_run_dir, publish_run
from assets.common.tuned_params import with_tuned_params
from foxhunt_pipeline.config.settings import current_settings
from foxhunt_pipeline.storage import model_store
from models import families
from models.agents import train as agents
from models.agents.saved_config import save_agent_config
from models.agents.training_report import curve_markdown, observes_note
from models.training.progress import progress_note
from models.windows import TrainingData
from resources.mlflow_tracking import MLflowResource, TrackedRun
from resources.storage import FoxhuntStorage
from resources.torch_device import TorchDevice


def train_agent_asset(context: dg.AssetExecutionContext, family: str, config: AgentTrainingConfig,
                      storage: FoxhuntStorage, mlflow: MLflowResource, torch_device: TorchDevice):
    """Shared by dqn_agent and ppo_agent: SB3 training with validation backtests logged to MLflow,
    safetensors policy + SB3 zip, registered version, pointer for evaluation."""
    data = load_dataset(storage)
    choice = torch_device.choose()
    forecasters, forecaster_configs, observed = current_forecasters(
        storage, data, choice.device, context.log)
    observes = ", ".join(f"{v['registered_model']} v{v['version']}" for v in observed.values())
    config, source = with_tuned_params(family, config, storage)
    train = families.family(family).train_function()
    agent_cfg = agent_config(family, config, str(choice.device))
    registered = families.family(family).registered_name
    run_dir = new_run_dir(storage, family, context.run.run_id)
    profile = current_settings().profile
    with mlflow.start_run(f"{family}-{context.run.run_id[:8]}", tags={"family": family, "dagster_run_id": context.run.run_id}) as run:
        run.log_params({"agent": agent_cfg.to_dict(), "device": choice.name,
                        "feature_hash": data.meta["feature_hash"], "observes": observed})
        run.set_tags({"hyperparameters_from": source})
        on_eval = _validation_logger(context, run, family, int(agent_cfg.total_timesteps), profile)
        result = train(data, agent_cfg, on_eval=on_eval, forecasters=forecasters,
                       forecaster_train_configs=forecaster_configs)
        paths, behaviour_md = _save_policy(run, family, result, agent_cfg, data, run_dir)
        version = registration.register(
            run, family, registered, run_dir / "policy", data, storage, profile=profile,
            metrics={"final_val_mean_reward": float(result.final_val_mean_reward),
                     "total_timesteps": int(agent_cfg.total_timesteps)},
            notes=[observes_note(observes)])
        run.set_tags({"precision": "fp32", "registered_version": version, "profile": profile})
        run_id = run.run_id
    where = publish_run(storage, family, run_dir, run_dir / "policy", {
        "mlflow_run_id": run_id, "registered_model": registered, "version": version,
        "dagster_run_id": context.run.run_id, "feature_hash": data.meta["feature_hash"],
        "observes": observed,
    })
    return dg.MaterializeResult(
        metadata={
            **_result_metadata(result, int(agent_cfg.total_timesteps)),
            "device": choice.name,
            "hyperparameters_from": source,
            "observes": observes,
            "mlflow_run_id": run_id,
            "mlflow_run": dg.MetadataValue.url(mlflow.run_url(run_id)),
            "registered_model": f"{registered} v{version}",
            "model_uri": f"models:/{registered}/{version}",
            "profile": profile,
            **behaviour_md,
            "policy": dg.MetadataValue.path(model_store.located(where, run_dir, paths["weights"])),
        }
    )


def _result_metadata(result, timesteps: int) -> dict:
    """What the training reached: its last validation backtest, its curve and its time."""
    return {
        "final_val_mean_reward": float(result.final_val_mean_reward),
        "timesteps": dg.MetadataValue.int(timesteps),
        "episodes": dg.MetadataValue.int(result.episodes),
        "val_trades": dg.MetadataValue.int(int(result.final_validation.get("trades", 0))),
        "validation_curve": dg.MetadataValue.md(curve_markdown(result.curve)),
        "training_seconds": round(float(result.train_seconds), 2),
    }


def _validation_logger(context: dg.AssetExecutionContext, run: TrackedRun, family: str,
                       total: int, profile: str) -> Callable[[dict], None]:
    """Per validation backtest during training: its metrics to MLflow and a progress line."""
    started = time.monotonic()

    def on_eval(point: dict) -> None:
        run.log_metrics({f"val_{k}": v for k, v in point.items() if k != "timesteps"},
                        step=int(point["timesteps"]))
        context.log.info(f"{family} @ {point['timesteps']}/{total} steps: val mean reward "
                         f"{point.get('mean_reward', float('nan')):.3g}"
                         f"{progress_note(int(point['timesteps']), total, time.monotonic() - started)}"
                         f" [profile {profile}]")

    return on_eval


def _save_policy(run: TrackedRun, family: str, result, agent_cfg: agents.AgentConfig,
                 data: TrainingData, run_dir: Path) -> tuple[dict, dict]:
    """The trained policy with its serving metadata and behaviour plots, logged to the run;
    returns the policy's paths and the behaviour's metadata."""
    paths = agents.save_policy(result.model, run_dir / "policy")
    paths["agent_config"] = save_agent_config(agent_cfg, run_dir / "policy")
    registration.write_agent_serving_meta(run_dir / "policy", data)
    behaviour_md = agent_behaviour(run, family, run_dir / "policy", data, run_dir / "interpretability",
                                   rows=agent_cfg.val_rows)
    run.log_artifacts(run_dir / "policy", "checkpoint")
    run.log_metrics({"train_seconds": result.train_seconds,
                     "final_val_mean_reward": result.final_val_mean_reward})
    return paths, behaviour_md
