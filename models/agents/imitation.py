"""PPO's warm start: imitate the forecasters' own trading rule before learning on-policy.

Why: PPO learns from the one position it took, so every update sees a bar's whole return
noise; from a uniform start its first thousands of steps teach it mainly that changing
position costs, and 20k steps leave too little to learn direction (walk-forward Sharpe CI
low below 0 on the demo). The forecasters' cost-aware rule (``band_action`` on the median
forecast of the horizon's return and the held position, what every forecaster is scored by)
is known from the state alone, so PPO starts from it (behaviour cloning, as in DAPG or
AlphaStar's supervised start) and its updates refine when the cost of a change is worth
paying.
"""

from __future__ import annotations

import numpy as np
import torch
from stable_baselines3 import PPO

from models.agents.state import StateLayout
from models.agents.trading_env import MarketData
from models.trading_rules import band_action


def rule_actions(market: MarketData, layout: StateLayout, rows: np.ndarray,
                 held: np.ndarray) -> np.ndarray:
    """The action (0 short, 1 flat, 2 long) of the forecasters' rule at ``rows`` holding
    ``held`` (-1, 0, 1): the mean of their medians of the horizon's return through the
    no-trade band of the root's one-way cost."""
    if not layout.cost:
        raise ValueError("the forecasters' rule needs the cost column in the state")
    n_q = len(layout.quantiles)
    median_q = layout.quantiles.index(0.5)
    width = layout.horizon * n_q
    cols = [k * width + (layout.horizon - 1) * n_q + median_q
            for k in range(len(layout.forecasters))]
    names = layout.names()
    if market.n_channels != len(names):
        raise ValueError(f"market has {market.n_channels} channels, the layout {len(names)}")
    median = market.features[rows][:, cols].mean(axis=1)
    cost = market.features[rows, names.index("cost")] * market.config.cost_multiplier
    return (band_action(median, cost, held) + 1).astype(np.int64)


def imitate_rule(model: PPO, market: MarketData, layout: StateLayout, epochs: int,
                 batch_size: int = 256, seed: int = 0) -> float:
    """``epochs`` passes of cross-entropy of PPO's policy on the rule's actions over every
    tradable row, each with a random held position (the rule keeps a position while the
    forecast keeps its sign, so the policy learns to read its own). Returns the share of
    rows where the greedy policy then agrees with the rule."""
    rng = np.random.default_rng(seed)
    rows = market.rows
    held_all = rng.integers(-1, 2, (int(epochs) + 1, rows.size))
    policy = model.policy
    policy.set_training_mode(True)
    for epoch in range(int(epochs)):
        held_rows = held_all[epoch]
        target = rule_actions(market, layout, rows, held_rows)
        order = rng.permutation(rows.size)
        for lo in range(0, rows.size, batch_size):
            idx = order[lo:lo + batch_size]
            obs = torch.as_tensor(market.observations(rows[idx], held_rows[idx]),
                                  device=policy.device)
            act = torch.as_tensor(target[idx], device=policy.device)
            _, log_prob, _ = policy.evaluate_actions(obs, act)
            loss = -log_prob.mean()
            policy.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), model.max_grad_norm)
            policy.optimizer.step()
    policy.set_training_mode(False)
    with torch.no_grad():
        held = held_all[-1]
        obs = torch.as_tensor(market.observations(rows, held), device=policy.device)
        greedy = policy.get_distribution(obs).mode().cpu().numpy()
    return float((greedy == rule_actions(market, layout, rows, held)).mean())


__all__ = ["imitate_rule", "rule_actions"]
