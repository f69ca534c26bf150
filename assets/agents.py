"""Agent training assets: DQN and PPO (stable-baselines3) deciding on what the forecasters
know (``models.agents.state``: the current tft_model's and mamba2_model's quantiles, a few
features and the cost), on the ``gpu`` pool like the forecasters, requested once the dataset
and the forecasters they observe are new."""

import math
import time
from collections.abc import Callable
from pathlib import Path

import dagster as dg
from pydantic import Field

from assets.common import code_version_of, registration
from assets.common.config_fields import delegated, sized
from assets.common.interpretability import agent_behaviour
from assets.common.tuned_params import with_tuned_params
from assets.training import (
    TRAINING_KW,
    load_dataset,
    mamba2_model,
    new_run_dir,
    progress_note,
    publish_run,
    tft_model,
)
from foxhunt_pipeline.config.settings import current_settings
from foxhunt_pipeline.storage import model_store
from models import families
from models.agents import forecast_memo
from models.agents import train as agents
from models.agents.saved_config import save_agent_config
from models.agents.trading_env import EnvConfig
from models.agents.train import DQNConfig, PPOConfig
from models.training.checkpoint import CheckpointMismatchError, check_compatible, load_checkpoint
from models.windows import TrainingData
from resources.mlflow_tracking import MLflowResource, TrackedRun
from resources.storage import FoxhuntStorage
from resources.torch_device import TorchDevice


def _agent_fields(cls: type, section: str) -> type[dg.Config]:
    """The fields both agents' Configs share (the ones a user tunes most), from ``cls``."""

    class AgentFields(dg.Config):
        total_timesteps: int = delegated(cls, "total_timesteps", "Environment steps to train.",
                                         section=section)
        learning_rate: float = delegated(cls, "learning_rate", "Optimizer learning rate.")
        gamma: float = delegated(cls, "gamma", "Discount factor.")
        net_arch: list[int] = delegated(cls, "net_arch", "Hidden layer widths of the heads.")
        encoder: str = delegated(cls, "encoder", "Window encoder: mlp or conv.")
        seed: int = delegated(cls, "seed", "Seed of the agent and its environments.")
        eval_freq: int = delegated(cls, "eval_freq", "Env steps between validation backtests.")
        train_rows: int = sized(section, "train_rows", 0, "Most recent train rows (all roots) "
                                "the agent learns on; its state is computed for those only. "
                                "0: the whole split.")
        val_rows: int = sized(section, "val_rows", 0, "Most recent validation rows its "
                              "backtests score. 0: the whole split.")
        cost_multiplier: float = delegated(EnvConfig, "cost_multiplier",
                                           "Times the root's one-way cost per contract.")
        vec_env: str = delegated(cls, "vec_env", "dummy (in process) or subproc (one process "
                                 "per env copy: parallel rollouts on a big box).")
        use_tuned: bool = Field(default=True, description="Take the newest study's best "
                                "parameters (FAMILY_tuning) for the fields this config does not set.")

    return AgentFields


class DQNTrainingConfig(_agent_fields(DQNConfig, "dqn_agent")):
    n_envs: int = delegated(DQNConfig, "n_envs", "Environment copies stepped together.")
    exploration_fraction: float = delegated(DQNConfig, "exploration_fraction",
                                            "Share of training spent decaying epsilon.")
    target_update_interval: int = delegated(DQNConfig, "target_update_interval",
                                            "Env steps between target-network updates.")
    learning_starts: int = delegated(DQNConfig, "learning_starts",
                                     "Env steps collected before learning starts.")
    imitate_epochs: int = delegated(DQNConfig, "imitate_epochs", "Epochs of pre-training on "
                                    "the forecasters' trading rule before DQN (0: from scratch).")


class PPOTrainingConfig(_agent_fields(PPOConfig, "ppo_agent")):
    n_envs: int = delegated(PPOConfig, "n_envs", "Environment copies stepped together.")
    n_steps: int = delegated(PPOConfig, "n_steps", "Env steps per copy per rollout.")
    ent_coef: float = delegated(PPOConfig, "ent_coef", "Entropy bonus coefficient.")
    imitate_epochs: int = delegated(PPOConfig, "imitate_epochs", "Epochs imitating the "
                                    "forecasters' trading rule before PPO (0: from scratch).")


AgentTrainingConfig = DQNTrainingConfig | PPOTrainingConfig
#: the training asset's Config of each agent family
AGENT_CONFIGS: dict[str, type[dg.Config]] = {"dqn": DQNTrainingConfig, "ppo": PPOTrainingConfig}


def agent_config(family: str, config: AgentTrainingConfig, device: str):
    """The library's ``DQNConfig`` / ``PPOConfig`` for an asset Config: what training runs
    and what the walk-forward retrains per fold."""
    fields = config.model_dump(exclude={"use_tuned"})
    env = EnvConfig(cost_multiplier=fields.pop("cost_multiplier"))
    cls = families.family(family).config_class()
    eval_freq = agents.validation_every(fields["total_timesteps"], fields["eval_freq"])
    rows = {k: fields.pop(k) or None for k in ("train_rows", "val_rows")}
    return cls.from_dict({**fields, **rows, "eval_freq": eval_freq, "device": device,
                          "env": env})


AGENT_KW = {**TRAINING_KW, "deps": [*TRAINING_KW["deps"], tft_model, mamba2_model]}


def current_forecasters(storage: FoxhuntStorage, data, device, log) -> tuple[dict, dict, dict]:
    """(models, their training configs, where they come from) of the current forecasters
    trained on this dataset's features; a missing one is left out with a warning."""
    models, train_configs, sources = {}, {}, {}
    for family in families.family("dqn").members:  # the agents observe the same forecasters
        try:
            pointer, checkpoint, _ = storage.current_model(family)
        except FileNotFoundError:
            log.warning(f"no current {family} model: the agent observes the others only")
            continue
        model, meta = load_checkpoint(checkpoint, device=device)
        try:
            check_compatible(meta, data)
        except CheckpointMismatchError as e:
            raise dg.Failure(f"the current {family} model was trained on other features than "
                             f"the dataset: materialize {family}_model first ({e})") from e
        if not math.isclose(float(meta.get("target_scale", data.target_scale)),
                            data.target_scale, rel_tol=1e-9):
            # its quantiles are in another dataset version's units: the state would mix them
            raise dg.Failure(f"the current {family} model was trained on another version of "
                             f"the dataset: materialize {family}_model first")
        models[family] = model
        train_configs[family] = meta.get("train_config", {})
        sources[family] = {"registered_model": pointer["registered_model"],
                           "version": pointer["version"], "mlflow_run_id": pointer["mlflow_run_id"]}
    if not models:
        raise dg.Failure("the agents decide on the forecasters' forecasts: materialize "
                         "tft_model and mamba2_model first")
    return models, train_configs, sources


def curve_markdown(curve: list[dict]) -> str:
    """The validation backtests during training: reward, Sharpe per bar and trades by step."""
    lines = ["| steps | mean reward / bar | Sharpe / bar | trades | exposure |",
             "|---:|---:|---:|---:|---:|"]
    lines += [f"| {int(p['timesteps'])} | {p.get('mean_reward', float('nan')):.3g} | "
              f"{p.get('sharpe_per_bar', float('nan')):.3f} | {int(p.get('trades', 0))} | "
              f"{p.get('mean_abs_position', float('nan')):.2f} |" for p in curve]
    return "\n".join(lines)


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
            notes=[_observes_note(observes)])
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


def _observes_note(observes: str) -> str:
    """The model card's line on what the agent decides on."""
    return (f"observes: the quantiles per horizon of {observes} (saved beside the policy), "
            "recent returns and volatility, the root's cost and its position")


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
    behaviour_md = agent_behaviour(run, family, run_dir / "policy", data, run_dir / "interpretability")
    run.log_artifacts(run_dir / "policy", "checkpoint")
    run.log_metrics({"train_seconds": result.train_seconds,
                     "final_val_mean_reward": result.final_val_mean_reward})
    return paths, behaviour_md


@dg.asset(
    kinds={"pytorch", "mlflow"},
    code_version=code_version_of("models.agents.train", "models.agents.trading_env",
                                 "models.agents.policy", "models.agents.state",
                                 "models.agents.replay"),
    description="DQN trading agent (stable-baselines3) deciding on the forecasters' quantiles, "
    "recent returns and volatility and its cost: short / flat / long, next-bar fills, costs in "
    "ticks; registered as `foxhunt-dqn`.",
    **AGENT_KW,
)
def dqn_agent(context: dg.AssetExecutionContext, config: DQNTrainingConfig, storage: FoxhuntStorage,
              mlflow: MLflowResource, torch_device: TorchDevice) -> dg.MaterializeResult:
    with forecast_memo.on_disk(storage.forecast_cache):
        return train_agent_asset(context, "dqn", config, storage, mlflow, torch_device)


@dg.asset(
    kinds={"pytorch", "mlflow"},
    code_version=code_version_of("models.agents.train", "models.agents.trading_env",
                                 "models.agents.policy", "models.agents.state",
                                 "models.agents.replay"),
    description="PPO actor-critic trading agent (stable-baselines3, vectorised envs) deciding on "
    "the forecasters' quantiles, recent returns and volatility and its cost; registered as "
    "`foxhunt-ppo`.",
    **AGENT_KW,
)
def ppo_agent(context: dg.AssetExecutionContext, config: PPOTrainingConfig, storage: FoxhuntStorage,
              mlflow: MLflowResource, torch_device: TorchDevice) -> dg.MaterializeResult:
    with forecast_memo.on_disk(storage.forecast_cache):
        return train_agent_asset(context, "ppo", config, storage, mlflow, torch_device)
