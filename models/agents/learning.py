"""What training either agent shares: the SB3 features extractor around ``WindowEncoder``,
the observed state, the train envs, the validation callback and ``learn`` itself.

Why a custom callback instead of SB3's ``EvalCallback``: that one replays episodes step by
step through the env; ours scores the whole validation split in batched forwards with
``evaluate_positions``, the same function and costs the evaluation layer uses for every model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv
from torch import nn

from models.agents.configs import AgentConfig
from models.agents.policy import ACTIVATIONS, WindowEncoder
from models.agents.state import ForecastState
from models.agents.trading_env import (
    MarketData,
    TradingEnv,
    evaluate_positions,
    prepare_market_data,
    summarize_backtest,
)
from models.windows import TrainingData, recent_rows

EvalHook = Callable[[dict[str, Any]], None]


class WindowFeaturesExtractor(BaseFeaturesExtractor):
    """SB3 adapter around ``WindowEncoder``; ``observation_meta`` travels into the export."""

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        encoder: dict[str, Any],
        observation_meta: dict[str, Any] | None = None,
        state: ForecastState | None = None,
    ):
        enc = WindowEncoder(**encoder)
        if observation_space.shape != (enc.obs_dim,):
            raise ValueError(
                f"observation space {observation_space.shape} does not match encoder "
                f"(lookback {enc.lookback} x {enc.n_channels} channels + position)"
            )
        super().__init__(observation_space, enc.features_dim)
        self.encoder = enc
        self.observation_meta = dict(observation_meta or {})
        self.state = state  # a plain attribute: the forecasters are not the agent's weights

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.encoder(observations)


@dataclass
class AgentResult:
    algo: str  # "dqn" or "ppo"
    model: BaseAlgorithm
    curve: list[dict[str, Any]]  # one entry per validation backtest
    train_seconds: float
    final_val_mean_reward: float  # mean net log return per bar on validation, kept policy
    final_validation: dict[str, float]
    config: AgentConfig
    episodes: int = 0  # training episodes completed (the Monitor of every env copy)


class ValidationCallback(BaseCallback):
    """Every ``eval_freq`` env steps (and at the end) backtest the greedy policy on a split;
    with ``keep_best`` the policy weights of the best backtest are restored at the end."""

    def __init__(self, market: MarketData, eval_freq: int, on_eval: EvalHook | None = None,
                 keep_best: bool = False):
        super().__init__(verbose=0)
        self.market = market
        self.eval_freq = int(eval_freq)
        self.on_eval = on_eval
        self.keep_best = keep_best
        self.curve: list[dict[str, Any]] = []
        self.best: tuple[float, int, dict[str, torch.Tensor]] | None = None
        self._next = self.eval_freq if self.eval_freq > 0 else None
        self._t0 = time.perf_counter()

    def _on_training_start(self) -> None:
        self._t0 = time.perf_counter()

    def _on_step(self) -> bool:
        # the last backtest waits for the end of training: the algorithm still updates the
        # policy after its last env step, and the policy returned is the one to report
        last = self.num_timesteps >= getattr(self.model, "_total_timesteps", float("inf"))
        if self._next is not None and self.num_timesteps >= self._next and not last:
            self._evaluate()
            while self._next <= self.num_timesteps:
                self._next += self.eval_freq
        return True

    def _on_training_end(self) -> None:
        if not self.curve or self.curve[-1]["timesteps"] != self.num_timesteps:
            self._evaluate()
        if self.keep_best and self.best is not None:
            self.model.policy.load_state_dict(self.best[2])

    @property
    def best_point(self) -> dict[str, Any]:
        """The curve point whose policy the model holds after training."""
        if not self.keep_best or self.best is None:
            return self.curve[-1]
        return next(p for p in self.curve if p["timesteps"] == self.best[1])

    def _evaluate(self) -> None:
        bt = evaluate_positions(self.model, self.market)
        point: dict[str, Any] = {
            "timesteps": int(self.num_timesteps),
            "wall_seconds": time.perf_counter() - self._t0,
            **summarize_backtest(bt),
        }
        episodes = getattr(self.model, "ep_info_buffer", None)
        if episodes:
            point["train_episode_reward_mean"] = float(np.mean([e["r"] for e in episodes]))
        self.curve.append(point)
        if self.keep_best and (self.best is None or point["mean_reward"] > self.best[0]):
            weights = {k: v.detach().clone() for k, v in self.model.policy.state_dict().items()}
            self.best = (float(point["mean_reward"]), point["timesteps"], weights)
        if self.on_eval is not None:
            self.on_eval(dict(point))


def validation_every(total_timesteps: int, eval_freq: int) -> int:
    """Env steps between validation backtests: at least one per 10% of training, so the
    curve has points and ``keep_best`` has policies to choose from."""
    return max(1, min(int(eval_freq), int(total_timesteps) // 10))


VEC_ENVS = ("dummy", "subproc")


def make_vec_env(market: MarketData, n_envs: int, kind: str = "dummy") -> VecEnv:
    """``n_envs`` copies of the train env. In-process copies share one MarketData; each
    subprocess gets its own (pickled once at start), which pays off only with idle cores."""
    if kind not in VEC_ENVS:
        raise ValueError(f"vec_env must be one of {VEC_ENVS}, got {kind!r}")
    if n_envs < 1:
        raise ValueError(f"n_envs must be >= 1, got {n_envs}")
    fns = [lambda: Monitor(TradingEnv(market, mode="train")) for _ in range(n_envs)]
    return DummyVecEnv(fns) if kind == "dummy" else SubprocVecEnv(fns)


def observation_meta(data: TrainingData, market: MarketData,
                      state: ForecastState | None) -> dict[str, Any]:
    env = market.config.to_dict()
    env["lookback"] = market.lookback
    return {
        "env": env,
        "observation": "forecasts" if state is not None else "window",
        **({"state_layout": state.layout.to_dict()} if state is not None else {}),
        "channel_names": market.channel_names,
        "reward_scale": market.reward_scale,
        "feature_hash": data.meta.get("feature_hash"),
    }


OBSERVATIONS = ("forecasts", "window")


def agent_state(data: TrainingData, config: AgentConfig,
                forecasters: Mapping[str, nn.Module] | None,
                train_configs: Mapping[str, Mapping[str, Any]] | None = None
                ) -> ForecastState | None:
    """The state the agent observes: its forecasters' (``observation="forecasts"``), or
    ``None`` for the raw window."""
    if config.observation not in OBSERVATIONS:
        raise ValueError(f"observation must be one of {OBSERVATIONS}, got {config.observation!r}")
    if config.observation == "window":
        return None
    if not forecasters:
        raise ValueError("observation='forecasts' needs the trained forecasters (tft_model, "
                         "mamba2_model); pass them, or set observation='window'")
    return ForecastState.for_data(forecasters, data, train_configs=train_configs)


def prepare_policy_kwargs(data: TrainingData, config: AgentConfig, state: ForecastState | None
                          ) -> tuple[MarketData, dict[str, Any]]:
    """The train split as the env sees it, and the SB3 ``policy_kwargs`` both agents share
    (the extractor with its encoder, observation metadata and state; the activation)."""
    if config.activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {config.activation!r}")
    train = prepare_market_data(data, "train", config.env, state=state)
    policy_kwargs = {
        "features_extractor_class": WindowFeaturesExtractor,
        "features_extractor_kwargs": {
            "encoder": config.encoder_config(train),
            "observation_meta": observation_meta(data, train, state),
            "state": state,
        },
        "activation_fn": ACTIVATIONS[config.activation],
    }
    return train, policy_kwargs


def learn(
    algo: str,
    model: BaseAlgorithm,
    config: AgentConfig,
    val: MarketData,
    on_eval: EvalHook | None,
) -> AgentResult:
    """``model.learn`` with the validation callback; the curve and the final validation."""
    callback = ValidationCallback(val, config.eval_freq, on_eval, keep_best=config.keep_best)
    # SB3's default logger makes an empty /tmp/SB3-<time> directory per learn() call; the
    # curve goes to on_eval (and MLflow) instead, so log nowhere
    model.set_logger(Logger(folder=None, output_formats=[]))
    t0 = time.perf_counter()
    try:
        model.learn(total_timesteps=config.total_timesteps, callback=callback, progress_bar=False)
        episodes = sum(len(r) for r in model.get_env().env_method("get_episode_rewards"))
    finally:
        if isinstance(model.get_env(), SubprocVecEnv):
            model.get_env().close()  # the policy no longer needs its rollout workers
    seconds = time.perf_counter() - t0
    final = {k: v for k, v in callback.best_point.items() if isinstance(v, float | int)}
    return AgentResult(
        algo=algo,
        model=model,
        curve=callback.curve,
        train_seconds=seconds,
        final_val_mean_reward=float(final["mean_reward"]),
        final_validation=final,
        config=config,
        episodes=int(episodes),
    )


def train_agent(
    algo: str,
    build: Callable[..., tuple[BaseAlgorithm, MarketData]],
    imitate: Callable[..., Any],
    data: TrainingData,
    config: AgentConfig,
    on_eval: EvalHook | None,
    eval_split: str,
    forecasters: Mapping[str, nn.Module] | None,
    forecaster_train_configs: Mapping[str, Mapping[str, Any]] | None,
) -> AgentResult:
    """What DQN and PPO training share: the state they observe, the model ``build`` makes on
    the train split, ``imitate`` of the forecasters' rule first (when the agent observes
    them), then learning with validation backtests."""
    data = recent_rows(data, {"train": config.train_rows, eval_split: config.val_rows})
    state = agent_state(data, config, forecasters, forecaster_train_configs)
    model, train = build(data, config, state)
    if config.imitate_epochs and state is not None:
        imitate(model, train, state.layout, config.imitate_epochs, seed=config.seed)
    val = prepare_market_data(data, eval_split, config.env, state=state)
    return learn(algo, model, config, val, on_eval)
