"""DQN's replay of every position, not only the one it held.

Why: the agent's position never moves the market, so one observed bar tells exactly what
each of the nine (current position, new position) pairs would have earned: the new position
times the bar's return, minus the cost of the change. Storing all nine transitions (SB3's
``replay_buffer_class`` hook) shows the network the cost of every change and the value of
every position from the first step, instead of waiting for epsilon-greedy exploration to
stumble on them. Without it, a short training left the Q-values of the three actions within
noise of each other, the greedy action flipped from bar to bar and DQN paid the cost on
nearly every bar (2,259 trades in the demo's test folds, Sharpe -83).

The rewards follow ``TradingEnv.step`` exactly (the environment puts the bar's return, the
unit cost and the reward scale in ``info``); the exit cost that ``close_at_end`` adds at a
stretch's end is a rule of evaluation, not of training, and is not replayed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from stable_baselines3.common.buffers import ReplayBuffer

from models.agents.trading_env import ACTION_POSITIONS, N_ACTIONS


class AllPositionsReplayBuffer(ReplayBuffer):
    """Each ``add`` stores the transition from every current position under every action."""

    def add(self, obs: np.ndarray, next_obs: np.ndarray, action: np.ndarray,
            reward: np.ndarray, done: np.ndarray, infos: list[dict[str, Any]]) -> None:
        try:
            ret, cost, scale = (np.array([info[k] for info in infos], dtype=np.float64)
                                for k in ("return", "unit_cost", "reward_scale"))
        except KeyError as e:
            raise KeyError(f"AllPositionsReplayBuffer needs TradingEnv's step info: {e}") from e
        for held in range(N_ACTIONS):
            for chosen in range(N_ACTIONS):
                new, old = ACTION_POSITIONS[chosen], ACTION_POSITIONS[held]
                pnl = new * ret - cost * abs(new - old)
                super().add(_with_position(obs, held), _with_position(next_obs, chosen),
                            np.full((len(infos), 1), chosen), (pnl * scale).astype(np.float32),
                            done, infos)


def _with_position(obs: np.ndarray, action: int) -> np.ndarray:
    """``obs`` with its trailing position one-hot set to ``action``'s position."""
    out = np.array(obs, copy=True)
    out[..., -N_ACTIONS:] = 0.0
    out[..., out.shape[-1] - N_ACTIONS + action] = 1.0
    return out
