"""Rollouts in worker processes (SB3 SubprocVecEnv): the same learning as in-process envs,
and the workers are gone when training ends."""

from __future__ import annotations

import multiprocessing

import pytest
import torch
from stable_baselines3.common.vec_env import SubprocVecEnv

from models.agents.train import (
    DQNConfig,
    PPOConfig,
    make_ppo,
    policy_net_from_model,
    train_dqn,
    train_ppo,
)
from tests.agent_toy_data import trend_training_data

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data():
    return trend_training_data(seed=0)


def _ppo(**kw) -> PPOConfig:
    return PPOConfig(**{**dict(total_timesteps=512, learning_rate=2e-3, n_envs=2, n_steps=128,
                               batch_size=64, n_epochs=2, eval_freq=0, net_arch=[16],
                               encoder_hidden=16, gamma=0.5, device="cpu", observation="window"), **kw})


def _weights(result) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in policy_net_from_model(result.model).state_dict().items()}


def test_subprocess_rollouts_learn_exactly_what_in_process_rollouts_learn(data):
    torch.set_num_threads(1)
    local = train_ppo(data, _ppo())
    parallel = train_ppo(data, _ppo(vec_env="subproc"))
    a, b = _weights(local), _weights(parallel)
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)
    assert parallel.curve[-1]["mean_reward"] == local.curve[-1]["mean_reward"]
    assert not multiprocessing.active_children()  # the rollout workers were closed


def test_dqn_steps_several_env_copies_in_worker_processes(data):
    cfg = DQNConfig(total_timesteps=400, learning_starts=100, buffer_size=2000, batch_size=32,
                    eval_freq=0, net_arch=[16], encoder_hidden=16, device="cpu", n_envs=2, observation="window",
                    vec_env="subproc")
    result = train_dqn(data, cfg)
    assert result.model.n_envs == 2 and result.model.num_timesteps >= 400
    assert not multiprocessing.active_children()


def test_an_unknown_vec_env_is_refused_before_any_process_starts(data):
    with pytest.raises(ValueError, match="vec_env must be one of"):
        make_ppo(data, _ppo(vec_env="ray"))
    model = make_ppo(data, _ppo(vec_env="subproc"))
    try:
        assert isinstance(model.get_env(), SubprocVecEnv)
    finally:
        model.get_env().close()
