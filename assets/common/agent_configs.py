"""The agent training assets' Dagster Configs (the fields a user tunes most, defaults
delegated to ``DQNConfig`` / ``PPOConfig``) and the library config they make: what training
runs and what the walk-forward retrains per fold."""

import dagster as dg
from pydantic import Field

from assets.common.config_fields import delegated, sized
from models import families
from models.agents import train as agents
from models.agents.trading_env import EnvConfig
from models.agents.train import DQNConfig, PPOConfig


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
