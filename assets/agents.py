"""Agent training assets: DQN and PPO (stable-baselines3) on the window environment, on the
``gpu`` pool like the forecasters, requested once per new training_dataset."""


import dagster as dg

from assets.common import code_version_of
from assets.training import TRAINING_KW, load_dataset, new_run_dir, profile_default, publish_run
from assets.tuned_params import with_tuned_params
from foxhunt_pipeline.storage import model_store
from resources.mlflow_tracking import MLflowResource
from resources.storage import FoxhuntStorage
from resources.torch_device import TorchDevice


class AgentTrainingConfig(dg.Config):
    """Mirrors models.agents.train.DQNConfig / PPOConfig (the fields a user tunes most)."""

    total_timesteps: int = 200_000
    learning_rate: float = 3e-4
    gamma: float = 0.9
    net_arch: list[int] = [64, 64]
    encoder: str = "mlp"
    seed: int = 0
    eval_freq: int = 10_000
    cost_multiplier: float = 1.0
    # "subproc": each of n_envs env copies in its own process (parallel rollouts on a big box)
    vec_env: str = "dummy"
    use_tuned: bool = True  # the newest study's best params (FAMILY_tuning) for fields not set here


class DQNTrainingConfig(AgentTrainingConfig):
    total_timesteps: int = profile_default("dqn_agent", "total_timesteps", 200_000)
    n_envs: int = 1
    learning_rate: float = 5e-4
    gamma: float = 0.5
    exploration_fraction: float = 0.2
    target_update_interval: int = 2_000
    learning_starts: int = 1_000


class PPOTrainingConfig(AgentTrainingConfig):
    total_timesteps: int = profile_default("ppo_agent", "total_timesteps", 200_000)
    learning_rate: float = 1e-3
    gamma: float = 0.5
    n_envs: int = 2
    n_steps: int = 512
    ent_coef: float = 0.0


def train_agent_asset(context: dg.AssetExecutionContext, family: str, config: AgentTrainingConfig,
                      storage: FoxhuntStorage, mlflow: MLflowResource, torch_device: TorchDevice):
    """Shared by dqn_agent and ppo_agent: SB3 training with validation backtests logged to MLflow,
    safetensors policy + SB3 zip, registered version, pointer for evaluation."""
    from models.agents import train as agents
    from models.agents.trading_env import EnvConfig

    data = load_dataset(storage)
    choice = torch_device.choose()
    config, source = with_tuned_params(family, config, storage)
    fields = config.model_dump(exclude={"use_tuned"})
    env = EnvConfig(cost_multiplier=fields.pop("cost_multiplier"))
    cls, train = (agents.DQNConfig, agents.train_dqn) if family == "dqn" else (agents.PPOConfig, agents.train_ppo)
    eval_freq = max(1, min(fields["eval_freq"], fields["total_timesteps"] // 4))
    agent_cfg = cls.from_dict({**fields, "eval_freq": eval_freq, "device": str(choice.device), "env": env})
    registered = model_store.REGISTERED_NAMES[family]
    run_dir = new_run_dir(storage, family, context.run.run_id)
    with mlflow.start_run(f"{family}-{context.run.run_id[:8]}", tags={"family": family, "dagster_run_id": context.run.run_id}) as run:
        run.log_params({"agent": agent_cfg.to_dict(), "device": choice.name, "feature_hash": data.meta["feature_hash"]})
        run.set_tags({"hyperparameters_from": source})

        def on_eval(point: dict) -> None:
            run.log_metrics({f"val_{k}": v for k, v in point.items() if k != "timesteps"},
                            step=int(point["timesteps"]))
            context.log.info(f"{family} @ {point['timesteps']} steps: val mean reward "
                             f"{point.get('mean_reward', float('nan')):.3g}")

        result = train(data, agent_cfg, on_eval=on_eval)
        paths = agents.save_policy(result.model, run_dir / "policy")
        run.log_artifacts(run_dir / "policy", "checkpoint")
        run.log_metrics({"train_seconds": result.train_seconds,
                         "final_val_mean_reward": result.final_val_mean_reward})
        version = run.register(registered, "checkpoint", tags={"precision": "fp32", "family": family})
        run.set_tags({"precision": "fp32", "registered_version": version})
        run_id = run.run_id
    where = publish_run(storage, family, run_dir, run_dir / "policy", {
        "mlflow_run_id": run_id, "registered_model": registered, "version": version,
        "dagster_run_id": context.run.run_id, "feature_hash": data.meta["feature_hash"],
    })
    return dg.MaterializeResult(
        metadata={
            "final_val_mean_reward": float(result.final_val_mean_reward),
            "timesteps": dg.MetadataValue.int(int(agent_cfg.total_timesteps)),
            "training_seconds": round(float(result.train_seconds), 2),
            "device": choice.name,
            "hyperparameters_from": source,
            "mlflow_run_id": run_id,
            "registered_model": f"{registered} v{version}",
            "policy": dg.MetadataValue.path(model_store.located(where, run_dir, paths["weights"])),
        }
    )


@dg.asset(
    kinds={"pytorch", "mlflow"},
    code_version=code_version_of("models.agents.train", "models.agents.trading_env", "models.agents.policy"),
    description="DQN trading agent (stable-baselines3) on the window environment: short / flat / "
    "long, next-bar fills, costs in ticks; registered as `foxhunt-dqn`.",
    **TRAINING_KW,
)
def dqn_agent(context: dg.AssetExecutionContext, config: DQNTrainingConfig, storage: FoxhuntStorage,
              mlflow: MLflowResource, torch_device: TorchDevice) -> dg.MaterializeResult:
    return train_agent_asset(context, "dqn", config, storage, mlflow, torch_device)


@dg.asset(
    kinds={"pytorch", "mlflow"},
    code_version=code_version_of("models.agents.train", "models.agents.trading_env", "models.agents.policy"),
    description="PPO actor-critic trading agent (stable-baselines3, vectorised envs); registered "
    "as `foxhunt-ppo`.",
    **TRAINING_KW,
)
def ppo_agent(context: dg.AssetExecutionContext, config: PPOTrainingConfig, storage: FoxhuntStorage,
              mlflow: MLflowResource, torch_device: TorchDevice) -> dg.MaterializeResult:
    return train_agent_asset(context, "ppo", config, storage, mlflow, torch_device)
