"""The DQN agent: SB3's DQN on the train env, every position replayed (``agents.replay``),
first imitating the forecasters' own rule (``agents.imitation``) when it observes them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stable_baselines3 import DQN
from torch import nn

from models.agents.configs import DQNConfig
from models.agents.imitation import imitate_rule_q
from models.agents.learning import (
    AgentResult,
    EvalHook,
    make_vec_env,
    prepare_policy_kwargs,
    train_agent,
)
from models.agents.replay import AllPositionsReplayBuffer
from models.agents.trading_env import MarketData, RowState
from models.windows import TrainingData


def make_dqn(data: TrainingData, config: DQNConfig | None = None,
             state: RowState | None = None) -> DQN:
    """An untrained SB3 DQN on the train split, observing ``state`` (or the raw window)."""
    return dqn_on_train(data, config or DQNConfig(), state)[0]


def dqn_on_train(data: TrainingData, config: DQNConfig, state: RowState | None
                 ) -> tuple[DQN, MarketData]:
    """``make_dqn`` and the train split it was prepared on (what imitation reads)."""
    train, policy_kwargs = prepare_policy_kwargs(data, config, state)
    policy_kwargs["net_arch"] = list(config.net_arch)
    every_position = config.replay_all_positions
    return DQN(
        "MlpPolicy",
        make_vec_env(train, config.n_envs, config.vec_env),
        learning_rate=config.learning_rate,
        # nine transitions per step when every position is replayed
        buffer_size=config.buffer_size * (9 if every_position else 1),
        replay_buffer_class=AllPositionsReplayBuffer if every_position else None,
        learning_starts=config.learning_starts,
        batch_size=config.batch_size,
        gamma=config.gamma,
        train_freq=config.train_freq,
        gradient_steps=config.gradient_steps,
        target_update_interval=config.target_update_interval,
        exploration_fraction=config.exploration_fraction,
        exploration_final_eps=config.exploration_final_eps,
        policy_kwargs=policy_kwargs,
        seed=config.seed,
        device=config.device,
        verbose=0,
    ), train


def train_dqn(
    data: TrainingData,
    config: DQNConfig | None = None,
    on_eval: EvalHook | None = None,
    eval_split: str = "validation",
    forecasters: Mapping[str, nn.Module] | None = None,
    forecaster_train_configs: Mapping[str, Mapping[str, Any]] | None = None,
) -> AgentResult:
    """Train DQN on the train split, observing ``forecasters`` (``config.observation``);
    ``on_eval`` receives each validation curve point."""
    return train_agent("dqn", dqn_on_train, imitate_rule_q, data, config or DQNConfig(), on_eval,
                       eval_split, forecasters, forecaster_train_configs)
