"""What the agents observe: the forecasters' quantiles on each bar's own window, a few
features and the cost; DQN replays every position; the policy travels with its forecasters."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from stable_baselines3.common.buffers import ReplayBuffer

from models.agents.policy import load_policy
from models.agents.replay import AllPositionsReplayBuffer
from models.agents.state import ForecastState
from models.agents.trading_env import (
    TradingEnv,
    evaluate_positions,
    prepare_market_data,
    summarize_backtest,
)
from models.agents.train import DQNConfig, save_policy, train_dqn
from models.registry import build_model
from models.training.loop import predict_quantiles
from models.windows import DEFAULT_QUANTILES
from tests.model_data import synthetic_training_data

pytestmark = pytest.mark.usefixtures("one_torch_thread")
L, H = 8, 2


@pytest.fixture(scope="module")
def data():
    return synthetic_training_data(n_rows={"train": 1500, "validation": 400, "test": 400},
                                   n_observed=4, n_known=2, n_static=2, lookback=L, horizon=H,
                                   signal=0.5, segment_length=200, seed=1)


def tiny_forecaster(data, family: str = "tft"):
    torch.manual_seed(0)
    config = {"n_static": 2, "n_observed": len(data.observed_names), "n_known": 2,
              "lookback": L, "horizon": H, "quantiles": list(DEFAULT_QUANTILES), "hidden": 8}
    if family == "tft":
        config.update(heads=1, lstm_layers=1, var_width=2)
    return build_model(family, config).eval()


def test_each_row_holds_the_forecasts_of_the_window_ending_there(data):
    tft, mamba = tiny_forecaster(data), tiny_forecaster(data, "mamba2")
    state = ForecastState.for_data({"tft": tft, "mamba2": mamba}, data, features=("f_1", "f_3"))
    got = state.compute(data, "test")
    q = len(DEFAULT_QUANTILES)
    assert got.shape == (400, 2 * H * q + 3) and len(state.names()) == got.shape[1]
    assert state.names()[:2] == ["tft_h1_q10", "tft_h1_q20"] and state.names()[-1] == "cost"
    windows = data.window_dataset("test")
    last = np.asarray(data.splits["test"].window_starts) + L - 1
    for k, model in enumerate((tft, mamba)):
        expected = predict_quantiles(model, windows).reshape(len(last), -1)
        np.testing.assert_allclose(got[last, k * H * q:(k + 1) * H * q], expected, rtol=1e-4,
                                   atol=1e-5)
    observed = np.asarray(data.splits["test"].observed)
    np.testing.assert_array_equal(got[:, -3:-1], observed[:, [1, 3]])
    np.testing.assert_allclose(got[:, -1], data.cost_log_return("test") / data.target_scale)
    # no state where the window is not whole: a segment's first L-1 rows and its last H rows
    seg = np.asarray(data.splits["test"].segment)
    first_rows = np.flatnonzero(np.diff(np.concatenate([[-1], seg])) != 0)
    for start in first_rows:
        assert np.isnan(got[start:start + L - 1, 0]).all()
        assert np.isfinite(got[start + L - 1, 0])
    assert np.isnan(got[-H:, 0]).all()
    assert state.compute(data, "test") is got  # the forecasters ran once for this split


def test_rows_without_a_state_are_never_traded(data):
    state = ForecastState.for_data({"tft": tiny_forecaster(data)}, data)
    bt = evaluate_positions(lambda o: np.full(len(o), 2), data, "test", state=state)
    st = state.compute(data, "test")
    assert np.isfinite(st[bt["rows"]]).all() and np.isfinite(st[bt["rows"] + 1]).all()
    assert bt["positions"].min() == 1  # always long where it may trade


def test_forecasters_of_another_feature_set_are_refused(data):
    other = synthetic_training_data(n_rows={"train": 300, "validation": 100, "test": 100},
                                    n_observed=5, n_known=2, n_static=2, lookback=L, horizon=H)
    with pytest.raises(ValueError, match="observed features"):
        ForecastState.for_data({"tft": tiny_forecaster(data)}, other)


def test_every_position_is_replayed_with_the_reward_the_environment_gives(data):
    """One step of the environment stores nine transitions; each reward is what the env pays
    for that (held, chosen) pair on the same bar."""
    state = ForecastState.for_data({"tft": tiny_forecaster(data)}, data)
    market = prepare_market_data(data, "train", state=state)
    env = TradingEnv(market, mode="eval")
    obs, _ = env.reset(seed=0)
    next_obs, _, _, trunc, info = env.step(2)
    buffer = AllPositionsReplayBuffer(20, env.observation_space, env.action_space)
    buffer.add(obs[None], next_obs[None], np.array([[2]]), np.array([0.0]), np.array([trunc]),
               [info])
    assert buffer.size() == 9
    for i in range(9):
        held = int(np.argmax(buffer.observations[i, 0, -3:]))
        chosen = int(buffer.actions[i, 0, 0])
        probe = TradingEnv(market, mode="eval")
        probe.reset(seed=0)
        probe._position = held - 1
        _, reward, *_ = probe.step(chosen)
        assert buffer.rewards[i, 0] == pytest.approx(reward, rel=1e-6, abs=1e-9)
        assert buffer.next_observations[i, 0, -3 + chosen] == 1.0
    assert isinstance(buffer, ReplayBuffer)


@pytest.mark.slow
def test_without_signal_the_agent_stays_out_instead_of_paying_costs():
    """On pure noise a forecast carries nothing: the agent must lose to flat by no more than a
    few round trips, not trade on most bars (DQN on the raw window traded 2,259 times in the
    demo's test folds, Sharpe -83)."""
    noise = synthetic_training_data(n_rows={"train": 3000, "validation": 600, "test": 1200},
                                    n_observed=4, n_known=2, n_static=2, lookback=L, horizon=H,
                                    signal=0.0, segment_length=600, seed=4)
    noise.meta["cost_log_return"] = [3e-4, 3e-4]  # a tick is a third of a bar's sd
    forecaster = tiny_forecaster(noise)
    config = DQNConfig(total_timesteps=4_000, learning_starts=500, eval_freq=0, net_arch=[32],
                       encoder_hidden=32, device="cpu", seed=0)
    result = train_dqn(noise, config, forecasters={"tft": forecaster})
    bt = evaluate_positions(result.model, noise, "test")
    summary = summarize_backtest(bt)
    assert summary["trades"] <= 0.02 * summary["n_rows"], summary


def test_a_policy_is_saved_with_its_forecasters_and_acts_the_same_after_loading(data, tmp_path):
    config = DQNConfig(total_timesteps=300, learning_starts=100, buffer_size=500, batch_size=32,
                       eval_freq=0, net_arch=[8], encoder_hidden=8, device="cpu")
    result = train_dqn(data, config, forecasters={"tft": tiny_forecaster(data)})
    save_policy(result.model, tmp_path / "policy")
    assert (tmp_path / "policy" / "state.json").is_file()
    assert (tmp_path / "policy" / "forecasters" / "tft" / "model.safetensors").is_file()
    loaded = load_policy(tmp_path / "policy")
    before = evaluate_positions(result.model, data, "test")
    after = evaluate_positions(loaded, data, "test")
    np.testing.assert_array_equal(before["positions"], after["positions"])
    assert before["rows"].size > 0
    (tmp_path / "policy" / "state.json").unlink()
    with pytest.raises(ValueError, match="forecasters"):
        load_policy(tmp_path / "policy")
