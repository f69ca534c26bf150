"""The agents' warm start: imitate the forecasters' own trading rule before learning.

Why: PPO learns from the one position it took, so every update sees a bar's whole return
noise; from a uniform start its first thousands of steps teach it mainly that changing
position costs, and 20k steps leave too little to learn direction (walk-forward Sharpe CI
low below 0 on the demo). The forecasters' cost-aware rule (``band_action`` on the median
forecast of the horizon's return and the held position, what every forecaster is scored by)
is known from the state alone, so PPO starts from it (behaviour cloning, as in DAPG or
AlphaStar's supervised start) and its updates refine when the cost of a change is worth
paying.

DQN's warm start (``imitate_rule_q``) is DQfD's pre-training phase (Hester et al. 2018): the
Q-network learns the rule's action by a large-margin loss, the rule's action worth at least
one cost more than any other, together with the one-step TD loss on every (held, chosen)
pair of each row (``agents.replay``'s nine transitions), so its values stay in reward units
and DQN's own updates start from them instead of from noise.
"""

from __future__ import annotations

import numpy as np
import torch
from stable_baselines3 import DQN, PPO
from torch.nn import functional as F

from models.agents.state import StateLayout
from models.agents.trading_env import ACTION_POSITIONS, N_ACTIONS, MarketData
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


def imitate_rule_q(model: DQN, market: MarketData, layout: StateLayout, epochs: int,
                   batch_size: int = 256, seed: int = 0, margin: float = 1.0) -> float:
    """``epochs`` passes of DQfD's pre-training over every tradable row with a next row in
    its stretch, each with a random held position: the large-margin loss (the rule's action
    at least ``margin`` x the row's one-way cost, in reward units, above every other) plus
    the one-step TD loss of all three actions against the target network, synced to the
    Q-network every epoch and at the end. Returns the share of rows where the greedy action
    then agrees with the rule."""
    rng = np.random.default_rng(seed)
    rows = market.rows
    held_all = rng.integers(-1, 2, (int(epochs) + 1, rows.size))
    policy = model.policy
    q_net, q_target = policy.q_net, policy.q_net_target
    # rows whose next row is in the same stretch: the TD target bootstraps from it
    stretch_end = np.zeros(market.features.shape[0], dtype=bool)
    stretch_end[market.stretch_ends] = True
    has_next = ~stretch_end[rows]
    positions = torch.as_tensor(ACTION_POSITIONS, dtype=torch.float32, device=policy.device)
    scale = float(market.reward_scale)
    policy.set_training_mode(True)
    for epoch in range(int(epochs)):
        q_target.load_state_dict(q_net.state_dict())
        held_rows = held_all[epoch]
        target = rule_actions(market, layout, rows, held_rows)
        order = rng.permutation(rows.size)
        for lo in range(0, rows.size, batch_size):
            idx = order[lo:lo + batch_size]
            r, held = rows[idx], held_rows[idx]
            dev = policy.device
            q = q_net(torch.as_tensor(market.observations(r, held), device=dev))
            act = torch.as_tensor(target[idx], device=dev)
            unit_cost = torch.as_tensor(market.cost[r] * scale, dtype=torch.float32, device=dev)
            # large margin: max_a [Q(s, a) + margin x cost x (a != rule)] - Q(s, rule)
            off_rule = 1.0 - F.one_hot(act, N_ACTIONS).float()
            q_rule = q.gather(1, act[:, None])[:, 0]
            margin_loss = ((q + margin * unit_cost[:, None] * off_rule).max(1).values - q_rule)
            # one-step TD on every chosen position from this held one
            nxt = idx[has_next[idx]]
            td_loss = torch.zeros((), device=dev)
            if nxt.size:
                rn, hn = rows[nxt], torch.as_tensor(held_rows[nxt], dtype=torch.float32, device=dev)
                ret = torch.as_tensor(market.returns[rn], dtype=torch.float32, device=dev)
                cost = torch.as_tensor(market.cost[rn], dtype=torch.float32, device=dev)
                reward = (positions[None, :] * ret[:, None]
                          - cost[:, None] * (positions[None, :] - hn[:, None]).abs()) * scale
                with torch.no_grad():
                    nxt_obs = np.concatenate([market.observations(rn + 1, int(p))
                                              for p in ACTION_POSITIONS])
                    v = q_target(torch.as_tensor(nxt_obs, device=dev)).max(1).values
                    y = reward + model.gamma * v.reshape(N_ACTIONS, -1).T
                pos_in_batch = torch.as_tensor(np.flatnonzero(has_next[idx]), device=dev)
                td_loss = F.smooth_l1_loss(q[pos_in_batch], y)
            loss = td_loss + margin_loss.mean()
            policy.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), model.max_grad_norm)
            policy.optimizer.step()
    q_target.load_state_dict(q_net.state_dict())
    policy.set_training_mode(False)
    with torch.no_grad():
        held = held_all[-1]
        obs = torch.as_tensor(market.observations(rows, held), device=policy.device)
        greedy = q_net(obs).argmax(1).cpu().numpy()
    return float((greedy == rule_actions(market, layout, rows, held)).mean())


__all__ = ["imitate_rule", "imitate_rule_q", "rule_actions"]
