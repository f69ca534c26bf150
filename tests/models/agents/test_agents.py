"""DQN / PPO agents: they learn an obvious policy, export without pickle, act on any batch."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from models.agents.policy import PolicyNet
from models.agents.trading_env import (
    EnvConfig,
    TradingEnv,
    evaluate_positions,
    prepare_market_data,
    summarize_backtest,
)
from models.agents.train import (
    DQNConfig,
    PPOConfig,
    ValidationCallback,
    load_policy,
    make_dqn,
    make_ppo,
    policy_net_from_model,
    save_policy,
    train_dqn,
    train_ppo,
)
from tests.agent_toy_data import trend_training_data

BATCH_SIZES = [1, 2, 3, 17, 64, 255, 256]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def data():
    return trend_training_data(seed=0)


def small_dqn(**kw) -> DQNConfig:
    base = dict(
        total_timesteps=2000, learning_rate=2e-3, learning_starts=200, train_freq=4,
        target_update_interval=100, exploration_fraction=0.3, buffer_size=5000, batch_size=32,
        eval_freq=500, net_arch=[32], encoder_hidden=32, gamma=0.5, device="cpu", observation="window",
    )
    return DQNConfig(**{**base, **kw})


def small_ppo(**kw) -> PPOConfig:
    base = dict(
        total_timesteps=2048, learning_rate=2e-3, n_envs=2, n_steps=256, batch_size=64,
        n_epochs=4, eval_freq=512, net_arch=[32], encoder_hidden=32, gamma=0.5, device="cpu",
        observation="window",
    )
    return PPOConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def dqn_result(data):
    points = []
    result = train_dqn(data, small_dqn(), on_eval=points.append)
    return result, points


@pytest.fixture(scope="module")
def ppo_result(data):
    points = []
    result = train_ppo(data, small_ppo(), on_eval=points.append)
    return result, points


def baselines(data) -> tuple[float, float]:
    """Mean validation reward of a seeded random policy and of the obvious optimum."""
    rng = np.random.default_rng(0)
    random = evaluate_positions(lambda o: rng.integers(0, 3, len(o)), data, "validation")
    follow = evaluate_positions(lambda o: np.where(o[:, 9] > 0, 2, 0), data, "validation")
    return summarize_backtest(random)["mean_reward"], summarize_backtest(follow)["mean_reward"]


@pytest.mark.parametrize("which", ["dqn_result", "ppo_result"])
def test_agent_beats_random_policy_clearly(data, which, request):
    result, points = request.getfixturevalue(which)
    random_mean, optimum = baselines(data)
    assert optimum > 0 > random_mean  # the task itself is what the test assumes
    # at least 3/4 of the way from random to optimal, on held-out validation rows
    assert result.final_val_mean_reward > random_mean + 0.75 * (optimum - random_mean)
    # and the test split (never seen in training or callbacks) agrees
    agent_test = summarize_backtest(evaluate_positions(result.model, data, "test"))
    follow_test = evaluate_positions(lambda o: np.where(o[:, 9] > 0, 2, 0), data, "test")
    assert agent_test["mean_reward"] > 0.75 * summarize_backtest(follow_test)["mean_reward"]


@pytest.mark.parametrize("which", ["dqn_result", "ppo_result"])
def test_validation_curve_is_recorded_and_reported(which, request):
    result, points = request.getfixturevalue(which)
    steps = [p["timesteps"] for p in result.curve]
    assert steps == sorted(steps) and len(steps) >= 4
    assert steps[-1] >= result.config.total_timesteps
    assert points == result.curve  # on_eval saw every point
    assert {"mean_reward", "sharpe_per_bar", "trades", "wall_seconds"} <= set(points[0])
    assert result.train_seconds > 0


@pytest.mark.parametrize("train", [train_dqn, train_ppo])
def test_the_policy_of_the_best_validation_backtest_is_kept(train, data):
    small = small_dqn if train is train_dqn else small_ppo
    result = train(data, small(total_timesteps=1024, eval_freq=256, keep_best=True))
    best = max(p["mean_reward"] for p in result.curve)
    assert result.final_val_mean_reward == best
    # the model holds that policy: replaying it gives the best point's figure, not the last's
    replay = summarize_backtest(evaluate_positions(result.model, data, "validation"))
    assert replay["mean_reward"] == pytest.approx(best, rel=1e-9, abs=1e-12)


def test_a_later_worse_policy_is_replaced_by_the_best_one_at_the_end(data):
    model = make_ppo(data, small_ppo())
    callback = ValidationCallback(prepare_market_data(data, "validation"), 1, keep_best=True)
    callback.init_callback(model)
    first = {k: v.clone() for k, v in model.policy.state_dict().items()}
    with torch.no_grad():
        model.policy.action_net.weight.mul_(-5.0)  # other decisions, another validation figure
    second = {k: v.clone() for k, v in model.policy.state_dict().items()}
    rewards = []
    for step, weights in enumerate((first, second), start=1):
        model.policy.load_state_dict(weights)
        callback.num_timesteps = step
        callback._evaluate()
        rewards.append(callback.curve[-1]["mean_reward"])
    assert rewards[0] != rewards[1]
    best, worse = (first, second) if rewards[0] > rewards[1] else (second, first)
    model.policy.load_state_dict(worse)  # training ends on the worse policy
    callback.num_timesteps = 3
    callback._on_training_end()
    for k, v in model.policy.state_dict().items():
        torch.testing.assert_close(v, best[k], rtol=0, atol=0)
    assert callback.best_point["mean_reward"] == max(rewards)


def test_without_keep_best_the_last_policy_is_kept(data):
    result = train_ppo(data, small_ppo(total_timesteps=1024, eval_freq=256))
    assert result.final_val_mean_reward == result.curve[-1]["mean_reward"]
    replay = summarize_backtest(evaluate_positions(result.model, data, "validation"))
    assert replay["mean_reward"] == pytest.approx(result.curve[-1]["mean_reward"], rel=1e-9)


def test_training_is_reproducible_from_the_seed(data):
    config = small_dqn(total_timesteps=400, learning_starts=100, eval_freq=200)
    a = train_dqn(data, config)
    b = train_dqn(data, config)
    c = train_dqn(data, small_dqn(total_timesteps=400, learning_starts=100, eval_freq=200, seed=1))
    q = lambda r: policy_net_from_model(r.model).head[-1].weight  # noqa: E731
    torch.testing.assert_close(q(a), q(b), rtol=0, atol=0)
    assert not torch.equal(q(a), q(c))


@pytest.mark.parametrize("which", ["dqn_result", "ppo_result"])
def test_safetensors_policy_reproduces_sb3_actions(which, request, tmp_path, data):
    result, _ = request.getfixturevalue(which)
    paths = save_policy(result.model, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.zip", "policy.json", "policy.safetensors"]
    assert all(paths[k].exists() for k in ("weights", "config", "sb3"))
    net = load_policy(tmp_path)
    assert isinstance(net, PolicyNet) and net.algo == result.algo
    cfg = json.loads(paths["config"].read_text())
    assert cfg["meta"]["env"]["lookback"] == 4 and len(cfg["meta"]["channel_names"]) == 3
    rng = np.random.default_rng(1)
    env = TradingEnv(data, "validation", mode="eval")
    real = env.market.observations(env.market.rows[:256], rng.integers(-1, 2, 256))
    noise = rng.standard_normal((256, net.obs_dim)).astype(np.float32)
    for obs in (real, noise):
        sb3_actions = result.model.predict(obs, deterministic=True)[0]
        np.testing.assert_array_equal(net.act(obs), sb3_actions)
    with pytest.raises(ValueError, match="expects observations of 15 values"):
        evaluate_positions(net, data, "validation", EnvConfig(lookback=5))
    same = evaluate_positions(net, data, "validation")
    np.testing.assert_array_equal(same["positions"], evaluate_positions(result.model, data, "validation")["positions"])


@pytest.mark.parametrize("kind", ["mlp", "conv"])
@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_untrained_export_matches_for_both_encoders(data, algo, kind, tmp_path):
    make, cfg = (make_dqn, small_dqn) if algo == "dqn" else (make_ppo, small_ppo)
    model = make(data, cfg(encoder=kind, conv_channels=8, env=EnvConfig(lookback=6)))
    save_policy(model, tmp_path)
    net = load_policy(tmp_path)
    obs = np.random.default_rng(2).standard_normal((128, net.obs_dim)).astype(np.float32)
    with torch.no_grad():
        scores = net(torch.from_numpy(obs))
        if algo == "dqn":
            ref = model.policy.q_net(torch.from_numpy(obs))
        else:
            ref = model.policy.get_distribution(torch.from_numpy(obs)).distribution.logits
            scores = torch.log_softmax(scores, dim=1)
    torch.testing.assert_close(scores, ref, rtol=1e-5, atol=1e-6)
    # the backtest reads the layout (lookback 6, not the dataset's 4) from the policy itself
    for policy in (net, model):
        assert evaluate_positions(policy, data, "validation")["rows"][0] == 5


@pytest.mark.parametrize("batch", BATCH_SIZES)
def test_policy_acts_on_every_batch_size(dqn_result, ppo_result, batch):
    rng = np.random.default_rng(batch)
    for result, _ in (dqn_result, ppo_result):
        net = policy_net_from_model(result.model)
        obs = rng.standard_normal((batch, net.obs_dim)).astype(np.float32)
        actions = net.act(obs)
        assert actions.shape == (batch,) and set(np.unique(actions)) <= {0, 1, 2}
        t = net.act(torch.from_numpy(obs))
        assert isinstance(t, torch.Tensor) and t.tolist() == actions.tolist()
        assert net.act(obs[0]).shape == (1,)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("which", ["dqn_result", "ppo_result"])
def test_loaded_policy_acts_on_cuda_like_cpu(which, request, tmp_path):
    result, _ = request.getfixturevalue(which)
    save_policy(result.model, tmp_path)
    cpu, gpu = load_policy(tmp_path), load_policy(tmp_path, device="cuda")
    for batch in BATCH_SIZES:
        obs = np.random.default_rng(batch).standard_normal((batch, cpu.obs_dim)).astype(np.float32)
        out = gpu.act(torch.from_numpy(obs).cuda())
        assert out.device.type == "cuda"
        np.testing.assert_array_equal(out.cpu().numpy(), cpu.act(obs))


def test_load_policy_rejects_mismatched_or_missing_files(dqn_result, ppo_result, tmp_path):
    with pytest.raises(FileNotFoundError, match="policy.json"):
        load_policy(tmp_path)
    save_policy(dqn_result[0].model, tmp_path / "dqn")
    save_policy(ppo_result[0].model, tmp_path / "ppo")
    (tmp_path / "dqn" / "policy.safetensors").replace(tmp_path / "ppo" / "policy.safetensors")
    cfg = json.loads((tmp_path / "ppo" / "policy.json").read_text())
    cfg["activation"] = "relu"  # keeps the JSON valid; the weights still come from the DQN
    cfg["hidden"] = [64]
    (tmp_path / "ppo" / "policy.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="does not match"):
        load_policy(tmp_path / "ppo")


def test_configs_round_trip_through_plain_dicts():
    for cls in (DQNConfig, PPOConfig):
        c = cls(total_timesteps=123, env=EnvConfig(cost_multiplier=2.0, lookback=7))
        d = c.to_dict()
        assert d["env"]["cost_multiplier"] == 2.0
        assert cls.from_dict(json.loads(json.dumps(d))) == c
        with pytest.raises(ValueError, match="unknown field"):
            cls.from_dict({**d, "bogus": 1})
    assert PPOConfig.demo().n_envs >= 2 and DQNConfig.demo().total_timesteps > 0


def test_training_leaves_no_logger_directory_behind(data, tmp_path, monkeypatch):
    """SB3's default logger made an empty SB3-<time> directory in the temp dir per run."""
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    train_dqn(data, small_dqn(total_timesteps=64, learning_starts=32))
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("SB3-")]
