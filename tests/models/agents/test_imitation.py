"""PPO's warm start imitates the forecasters' own rule, read from the state alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.agents.imitation import imitate_rule, imitate_rule_q, rule_actions
from models.agents.state import ForecastState, forecasts
from models.agents.trading_env import EnvConfig, prepare_market_data
from models.agents.train import DQNConfig, PPOConfig, make_dqn, make_ppo, train_dqn, train_ppo
from models.trading_rules import band_action
from models.training.loop import TrainConfig, train_forecaster
from tests.models.agents.test_forecast_state import H, L, data, tiny_forecaster  # noqa: F401

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def state(data):  # noqa: F811
    models = {"tft": tiny_forecaster(data), "mamba2": tiny_forecaster(data, "mamba2")}
    for model in models.values():  # the data's signal, so their medians change sign
        train_forecaster(model, data, TrainConfig(epochs=2, max_batches_per_epoch=20,
                                                  batch_size=64, seed=0), device="cpu")
    return ForecastState.for_data(models, data)


@pytest.fixture(scope="module")
def env(data, state):  # noqa: F811
    """A cost the forecasters' mean median clears on half the bars (rule: flat on the rest)."""
    raw = state.compute(data, "train")
    ok = np.isfinite(raw).all(1)
    q = len(state.layout.quantiles)
    median = raw[ok][:, [k * H * q + (H - 1) * q + 4 for k in range(2)]].mean(1)
    return EnvConfig(cost_multiplier=float(np.median(np.abs(median) / raw[ok, -1])))


def test_the_rule_is_the_forecasters_band_rule(data, state, env):  # noqa: F811
    market = prepare_market_data(data, "train", env, state=state)
    rows = market.rows
    part = data.splits["train"]
    median = np.mean([forecasts(m, part, L, H)[rows, H - 1, 4] for m in state.forecasters.values()],
                     axis=0)
    cost = data.cost_log_return("train")[rows] / data.target_scale * env.cost_multiplier
    counts = np.zeros(3)
    for side in (-1, 0, 1):
        held = np.full(rows.size, side)
        expected = band_action(median, cost, held) + 1
        got = rule_actions(market, state.layout, rows, held)
        assert np.mean(got == expected) > 0.999  # float32 state vs float64, at the band's edge
        counts += np.bincount(got, minlength=3)
    assert counts[1] > 0.1 * counts.sum() and counts[0] + counts[2] > 0.1 * counts.sum(), counts
    # inside the band the held position decides: kept while the forecast keeps its sign
    inside = np.abs(median) < 0.9 * cost
    long_kept = rule_actions(market, state.layout, rows, np.ones(rows.size, np.int64))
    assert inside.any()
    assert np.all(long_kept[inside & (median > 1e-9)] == 2)
    assert np.all(long_kept[inside & (median < -1e-9)] == 1)


def test_ppo_imitates_the_rule_before_it_learns(data, state, env):  # noqa: F811
    # the cloning step is the policy optimizer's (learning_rate): 1e-3 clones in 32 epochs
    config = PPOConfig(total_timesteps=512, n_steps=256, batch_size=64, device="cpu", env=env,
                       net_arch=[32], encoder_hidden=32, learning_rate=1e-3)
    market = prepare_market_data(data, "train", env, state=state)
    model = make_ppo(data, config, state)
    before = imitate_rule(model, market, state.layout, epochs=0)
    after = imitate_rule(model, market, state.layout, epochs=32)  # ~190 batches: the demo's 3
    assert before < 0.6 < 0.85 < after, (before, after)  # epochs over its rows are ~240


def test_train_ppo_starts_from_the_rule(data, state, env):  # noqa: F811
    """One rollout after imitation: the trained agent still mostly follows the rule (from
    scratch it agrees on about a third of the bars)."""
    config = dict(total_timesteps=128, n_envs=1, n_steps=128, batch_size=64, device="cpu",
                  env=env, net_arch=[32], encoder_hidden=32, learning_rate=1e-3)
    market = prepare_market_data(data, "train", env, state=state)
    agreement = {}
    for epochs in (0, 32):
        result = train_ppo(data, PPOConfig(**config, imitate_epochs=epochs),
                           forecasters=state.forecasters)
        agreement[epochs] = imitate_rule(result.model, market, result.model.policy
                                         .features_extractor.state.layout, epochs=0)
    assert agreement[0] < 0.6 < 0.8 < agreement[32], agreement


def test_dqn_imitates_the_rule_before_it_learns(data, state, env):  # noqa: F811
    """DQfD's pre-training: the greedy Q action follows the rule, and the target network
    holds the same weights (DQN's first TD targets come from the pre-trained values)."""
    config = DQNConfig(total_timesteps=256, learning_starts=64, device="cpu", env=env,
                       net_arch=[32], encoder_hidden=32)
    market = prepare_market_data(data, "train", env, state=state)
    model = make_dqn(data, config, state)
    before = imitate_rule_q(model, market, state.layout, epochs=0)
    after = imitate_rule_q(model, market, state.layout, epochs=32)
    assert after > 0.85 and after > before + 0.15, (before, after)
    for a, b in zip(model.policy.q_net.parameters(), model.policy.q_net_target.parameters(),
                    strict=True):
        assert torch.equal(a, b)


def test_train_dqn_starts_from_the_rule(data, state, env):  # noqa: F811
    """A short DQN run after pre-training still mostly follows the rule; from scratch it
    does not. (32 epochs over these ~1,400 rows are ~190 batches; the demo's 10 epochs over
    its folds' train rows are more.)"""
    config = dict(total_timesteps=256, learning_starts=64, device="cpu", env=env,
                  net_arch=[32], encoder_hidden=32)
    market = prepare_market_data(data, "train", env, state=state)
    agreement = {}
    assert DQNConfig().imitate_epochs > 0  # DQN imitates by default
    for name, extra in (("imitated", {"imitate_epochs": 32}), ("scratch", {"imitate_epochs": 0})):
        result = train_dqn(data, DQNConfig(**config, **extra), forecasters=state.forecasters)
        agreement[name] = imitate_rule_q(result.model, market, state.layout, epochs=0)
    assert agreement["imitated"] > max(0.75, agreement["scratch"] + 0.1), agreement
