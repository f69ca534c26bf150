"""TradingEnv: timing (no lookahead), cost accounting, episode boundaries, SB3/gymnasium API."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from models.agents.trading_env import (
    EnvConfig,
    TradingEnv,
    evaluate_positions,
    prepare_market_data,
    summarize_backtest,
)
from tests.agent_toy_data import trend_training_data
from tests.model_data import synthetic_training_data

SHORT, FLAT, LONG = 0, 1, 2
RAW = EnvConfig(reward_scale=1.0)  # rewards in raw log returns


@pytest.fixture(scope="module")
def data():
    # segments of 300 rows, a session gap every 110 rows: both boundaries occur often
    return trend_training_data(
        {"train": 900, "validation": 700, "test": 400}, segment_length=300, session_length=110, seed=3
    )


def run_episode(env: TradingEnv, actions, seed=None):
    """Step a fixed action sequence (cycled) until truncation; collect obs, rewards, infos."""
    obs, info = env.reset(seed=seed)
    observations, rewards, infos = [obs], [], []
    i = 0
    while True:
        obs, r, term, trunc, info = env.step(actions[i % len(actions)])
        assert not term
        observations.append(obs)
        rewards.append(r)
        infos.append(info)
        i += 1
        if trunc:
            return observations, rewards, infos


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_passes_gymnasium_and_sb3_env_checks(data, mode):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gym_check_env(TradingEnv(data, "train", mode=mode), skip_render_check=True)
        sb3_check_env(TradingEnv(data, "validation", mode=mode))


def test_real_format_dataset_gives_window_of_observed_and_known():
    d = synthetic_training_data({"train": 500, "validation": 200}, segment_length=250)
    env = TradingEnv(d, "train")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (d.lookback * (12 + 10) + 3,)
    no_known = TradingEnv(d, "train", EnvConfig(include_known=False))
    assert no_known.observation_space.shape == (d.lookback * 12 + 3,)
    s = d.splits["train"]
    window = obs[:-3].reshape(d.lookback, 22)
    t = env.reset(seed=0)[1]["row"]
    np.testing.assert_array_equal(window[:, :12], np.clip(s.observed[t - d.lookback + 1 : t + 1], -10, 10))
    np.testing.assert_array_equal(window[:, 12:], s.known[t - d.lookback + 1 : t + 1])
    np.testing.assert_array_equal(obs[-3:], [0, 1, 0])  # starts flat


def test_observation_at_t_ignores_everything_after_t(data):
    actions = [LONG, LONG, SHORT, FLAT, LONG, SHORT]
    env = TradingEnv(data, "validation", RAW, mode="eval")
    obs_a, _, infos = run_episode(env, actions)
    k = 25  # decision step k is taken at row t_k, seeing obs_a[k]
    t_k = infos[k]["row"]
    future = copy.deepcopy(data)
    s = future.splits["validation"]
    rng = np.random.default_rng(0)
    s.observed[t_k + 1 :] = rng.standard_normal(s.observed[t_k + 1 :].shape)
    s.known[t_k + 1 :] = rng.standard_normal(s.known[t_k + 1 :].shape)
    s.targets[t_k + 1 :] = rng.standard_normal(s.targets[t_k + 1 :].shape) * 1e-3
    s.targets[t_k, 0] *= -5  # the return earned by the decision at t_k is future too
    obs_b, _, infos_b = run_episode(TradingEnv(future, "validation", RAW, mode="eval"), actions)
    for j in range(k + 1):
        np.testing.assert_array_equal(obs_a[j], obs_b[j])
    assert not np.array_equal(obs_a[k + 1], obs_b[k + 1])  # row t_k+1 did change what is seen

    # the batched backtest is causal too: positions up to t_k do not move
    def follow(o):
        return np.where(o[:, 9] > 0, LONG, SHORT)  # last row's f_last_sign (4 rows x 3 ch)

    a = evaluate_positions(follow, data, "validation", RAW)
    b = evaluate_positions(follow, future, "validation", RAW)
    upto = a["rows"] <= t_k
    np.testing.assert_array_equal(a["positions"][upto], b["positions"][upto])


def test_position_is_held_from_t_to_t_plus_1_and_earns_next_return(data):
    env = TradingEnv(data, "validation", RAW, mode="eval")
    _, rewards, infos = run_episode(env, [LONG])
    returns = data.splits["validation"].targets[:, 0]
    rows = [i["row"] for i in infos]
    np.testing.assert_allclose(rewards[1:], returns[rows[1:]], rtol=0, atol=1e-12)


def test_cost_charged_once_per_unit_of_position_change(data):
    actions = [LONG, LONG, SHORT, SHORT, FLAT, FLAT, LONG, FLAT, SHORT, LONG]
    env = TradingEnv(data, "validation", EnvConfig(reward_scale=1.0, cost_multiplier=3.0), mode="eval")
    _, rewards, infos = run_episode(env, actions)
    unit = 3.0 * data.meta["cost_log_return"][0]
    positions = np.array([i["position"] for i in infos])
    changes = np.abs(np.diff(np.concatenate([[0], positions])))
    costs = np.array([i["cost"] for i in infos])
    np.testing.assert_allclose(costs, unit * changes, rtol=1e-12, atol=0)
    assert (costs[changes == 0] == 0).all()
    gross = np.array([i["gross_log_return"] for i in infos])
    np.testing.assert_allclose(rewards, gross - costs, rtol=1e-12, atol=1e-15)


def test_always_flat_earns_exactly_zero(data):
    env = TradingEnv(data, "validation", RAW, mode="eval")
    for _ in range(env.n_stretches):
        _, rewards, _ = run_episode(env, [FLAT])
        assert all(r == 0.0 for r in rewards)
    bt = evaluate_positions(lambda o: np.full(len(o), FLAT), data, "validation", RAW)
    assert bt["rewards"].size > 0 and (bt["rewards"] == 0.0).all()


@pytest.mark.parametrize("close_at_end, n_costs", [(False, 1), (True, 2)])
def test_always_long_earns_returns_minus_entry_cost(data, close_at_end, n_costs):
    config = EnvConfig(reward_scale=1.0, close_at_end=close_at_end)
    env = TradingEnv(data, "validation", config, mode="eval")
    returns = data.splits["validation"].targets[:, 0].astype(np.float64)
    cost = data.meta["cost_log_return"][0]
    for _ in range(env.n_stretches):
        _, rewards, infos = run_episode(env, [LONG])
        rows = [i["row"] for i in infos]
        expected = returns[rows].sum() - n_costs * cost
        assert sum(rewards) == pytest.approx(expected, rel=0, abs=1e-12)


def test_reward_is_scaled_log_return_by_default(data):
    env = TradingEnv(data, "train")
    env.reset(seed=0)
    _, r, _, _, info = env.step(LONG)
    assert r == pytest.approx(info["log_return"] / data.target_scale)


def test_training_episodes_stay_inside_one_segment_and_session(data):
    config = EnvConfig(max_episode_steps=64)
    env = TradingEnv(data, "train", config)
    s = data.splits["train"]
    spacing = np.median(np.diff(s.ts_event))
    rng = np.random.default_rng(0)
    starts = set()
    for seed in range(40):
        _, _, infos = run_episode(env, list(rng.integers(0, 3, 16)), seed=seed)
        rows = np.array([i["row"] for i in infos])
        starts.add(int(rows[0]))
        assert len(rows) <= 64
        assert (np.diff(rows) == 1).all()
        touched = np.concatenate([rows, [rows[-1] + 1]])  # the last step holds into row +1
        assert (s.segment[touched] == s.segment[rows[0]]).all()
        assert (np.diff(s.ts_event[touched]) <= 1.5 * spacing).all()
        # the observation window never reaches into the previous segment
        assert s.segment[rows[0] - env.market.lookback + 1] == s.segment[rows[0]]
    assert len(starts) > 20  # random starts


def test_evaluation_mode_covers_every_tradable_row_once(data):
    env = TradingEnv(data, "validation", mode="eval")
    m = env.market
    seen = []
    for _ in range(env.n_stretches):
        seen += [i["row"] for i in run_episode(env, [LONG, SHORT])[2]]
    np.testing.assert_array_equal(seen, m.rows)
    s = data.splits["validation"]
    # boundaries: rows before a session gap or at a segment end are never traded
    assert env.n_stretches >= 6
    for end in m.stretch_ends:
        nxt = end + 1
        crosses = s.segment[nxt + 1] != s.segment[nxt] if nxt + 1 < s.n_rows else True
        gap = s.ts_event[nxt + 1] - s.ts_event[nxt] > 90e9 if nxt + 1 < s.n_rows else True
        assert crosses or gap or not np.isfinite(s.targets[nxt, 0])


def test_random_start_is_reproducible_from_the_seed(data):
    a, b = TradingEnv(data, "train"), TradingEnv(data, "train")
    rows_a = [a.reset(seed=s)[1]["row"] for s in range(10)]
    rows_b = [b.reset(seed=s)[1]["row"] for s in range(10)]
    assert rows_a == rows_b and len(set(rows_a)) > 1


def test_batched_backtest_matches_stepping_the_env(data):
    def policy(o):  # uses the position one-hot, so the path matters
        follow = np.where(o[:, 9] > 0, LONG, SHORT)
        return np.where(o[:, -2] == 1, FLAT + (o[:, 10] > 0), follow)

    config = EnvConfig(reward_scale=1.0, close_at_end=True)
    env = TradingEnv(data, "validation", config, mode="eval")
    positions, rewards = [], []
    for _ in range(env.n_stretches):
        obs, _ = env.reset()
        while True:
            obs, r, _, trunc, info = env.step(int(policy(obs[None])[0]))
            positions.append(info["position"])
            rewards.append(r)
            if trunc:
                break
    bt = evaluate_positions(policy, data, "validation", config, batch_size=97)
    np.testing.assert_array_equal(bt["positions"], positions)
    np.testing.assert_allclose(bt["rewards"], rewards, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(bt["ts"], data.splits["validation"].ts_event[bt["rows"]])
    summary = summarize_backtest(bt)
    assert summary["total_log_return"] == pytest.approx(sum(rewards))


def test_non_finite_feature_inside_a_window_is_named(data):
    bad = copy.deepcopy(data)
    bad.splits["validation"].observed[150, 1] = np.nan
    with pytest.raises(ValueError, match=r"f_noise_0.*row 150"):
        prepare_market_data(bad, "validation")
    with pytest.raises(ValueError, match="split 'nope'"):
        prepare_market_data(data, "nope")


def test_invalid_action_and_step_before_reset_are_rejected(data):
    env = TradingEnv(data, "train")
    with pytest.raises(RuntimeError, match="reset"):
        env.step(LONG)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action"):
        env.step(3)
