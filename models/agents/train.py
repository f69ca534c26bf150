"""DQN and PPO trading agents on ``TradingEnv``, trained with stable-baselines3: the public
names, each from the module that holds it.

SB3 provides the algorithms; ``models.agents.learning`` adds the features extractor, the
validation callback and ``learn``, ``models.agents.configs`` the configs that mirror the
Dagster run config, ``models.agents.dqn`` / ``models.agents.ppo`` the two algorithms and
``models.agents.sb3_export`` a pickle-free export. With ``observation="forecasts"`` (the
default) an agent observes the forecasters it is given through
``models.agents.state.ForecastState``; ``"window"`` keeps the raw 60-bar window (see that
module for why the agents do not use it). DQN replays every position at once
(``models.agents.replay``).
"""

from __future__ import annotations

from models.agents.configs import AgentConfig, DQNConfig, PPOConfig
from models.agents.dqn import make_dqn, train_dqn
from models.agents.learning import (
    OBSERVATIONS,
    VEC_ENVS,
    AgentResult,
    EvalHook,
    ValidationCallback,
    WindowFeaturesExtractor,
    agent_state,
    validation_every,
)
from models.agents.policy import PolicyNet, load_policy
from models.agents.ppo import make_ppo, train_ppo
from models.agents.sb3_export import SB3_FILE, policy_net_from_model, save_policy

__all__ = [
    "OBSERVATIONS",
    "SB3_FILE",
    "VEC_ENVS",
    "AgentConfig",
    "AgentResult",
    "EvalHook",
    "DQNConfig",
    "PPOConfig",
    "PolicyNet",
    "ValidationCallback",
    "WindowFeaturesExtractor",
    "agent_state",
    "load_policy",
    "make_dqn",
    "make_ppo",
    "policy_net_from_model",
    "save_policy",
    "train_dqn",
    "train_ppo",
    "validation_every",
]
