"""The PPO agent: SB3's PPO on ``n_envs`` copies of the train env, first imitating the
forecasters' own trading rule (``agents.imitation``) when it observes them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stable_baselines3 import PPO
from torch import nn

from models.agents.configs import PPOConfig
from models.agents.imitation import imitate_rule
from models.agents.learning import (
    AgentResult,
    EvalHook,
    make_vec_env,
    prepare_policy_kwargs,
    train_agent,
)
from models.agents.trading_env import MarketData, RowState
from models.windows import TrainingData


def make_ppo(data: TrainingData, config: PPOConfig | None = None,
             state: RowState | None = None) -> PPO:
    """An untrained SB3 PPO on ``n_envs`` copies of the train env (see ``vec_env``)."""
    return ppo_on_train(data, config or PPOConfig(), state)[0]


def ppo_on_train(data: TrainingData, config: PPOConfig, state: RowState | None
                  ) -> tuple[PPO, MarketData]:
    """``make_ppo`` and the train split it was prepared on (what imitation reads)."""
    train, policy_kwargs = prepare_policy_kwargs(data, config, state)
    policy_kwargs["net_arch"] = {"pi": list(config.net_arch), "vf": list(config.net_arch)}
    return PPO(
        "MlpPolicy",
        make_vec_env(train, config.n_envs, config.vec_env),
        learning_rate=config.learning_rate,
        n_steps=config.n_steps,
        batch_size=config.batch_size,
        n_epochs=config.n_epochs,
        gamma=config.gamma,
        gae_lambda=config.gae_lambda,
        clip_range=config.clip_range,
        ent_coef=config.ent_coef,
        vf_coef=config.vf_coef,
        max_grad_norm=config.max_grad_norm,
        policy_kwargs=policy_kwargs,
        seed=config.seed,
        device=config.device,
        verbose=0,
    ), train


def train_ppo(
    data: TrainingData,
    config: PPOConfig | None = None,
    on_eval: EvalHook | None = None,
    eval_split: str = "validation",
    forecasters: Mapping[str, nn.Module] | None = None,
    forecaster_train_configs: Mapping[str, Mapping[str, Any]] | None = None,
) -> AgentResult:
    """Train PPO, observing ``forecasters`` (``config.observation``); ``on_eval`` receives
    each validation curve point."""
    return train_agent("ppo", ppo_on_train, imitate_rule, data, config or PPOConfig(), on_eval,
                       eval_split, forecasters, forecaster_train_configs)
