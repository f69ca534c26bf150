"""The evaluation asset retrains each fold with the configuration the production run saved
(or, for older runs, logged to MLflow): ``production_settings`` gives the family's registry
builder the same training configs back."""

from __future__ import annotations

from torch import nn

from assets.common.agent_configs import PPOTrainingConfig, agent_config
from assets.common.production_settings import production_settings
from assets.common.training_configs import TFTTrainingConfig, train_config
from models.agents import train as agents
from models.agents.saved_config import save_agent_config
from models.agents.trading_env import EnvConfig
from models.evaluation.family_candidates import production_candidate
from models.training.checkpoint import save_checkpoint
from resources.logged_params import training_params
from resources.mlflow_tracking import MLflowResource


def test_logged_training_configs_round_trip(foxhunt_home):
    mlflow = MLflowResource(home=str(foxhunt_home))
    ppo = agent_config("ppo", PPOTrainingConfig(total_timesteps=4096, net_arch=[16, 8],
                                                cost_multiplier=2.0), "cpu")
    assert ppo.eval_freq == 409 and ppo.env.cost_multiplier == 2.0
    tft = TFTTrainingConfig(epochs=3, learning_rate=5e-4)
    with mlflow.start_run("ppo") as run:
        run.log_params({"agent": ppo.to_dict(), "device": "cpu"})
        ppo_run = run.run_id
    with mlflow.start_run("tft") as run:
        run.log_params({"model": {"hidden": 8}, "train": tft.model_dump()})
        tft_run = run.run_id

    logged = training_params(mlflow, ppo_run, "agent")
    assert agents.PPOConfig.from_dict({**logged, "env": EnvConfig(**logged["env"])}) == ppo
    settings = production_settings("ppo", None, mlflow, ppo_run, None, "cpu")
    assert settings == ppo
    assert production_candidate("ppo", None, settings).name == "foxhunt-ppo"
    # nothing saved or logged: the asset Config's defaults
    dqn = production_settings("dqn", None, mlflow, None, None, "cpu")
    assert production_candidate("dqn", None, dqn).name == "foxhunt-dqn"
    back = training_params(mlflow, tft_run, "train")
    assert TFTTrainingConfig(**back) == tft


def test_forecaster_train_config_from_checkpoint(foxhunt_home, tmp_path):
    """The walk-forward retrains a forecaster with the training config its checkpoint carries
    (the same as its logged Config gives), and falls back to the logged Config for a checkpoint
    without one; logged parameters are then not read for it."""
    tft = TFTTrainingConfig(epochs=3, learning_rate=5e-4, max_batches_per_epoch=7)
    with_config = save_checkpoint(tmp_path / "new", nn.Linear(1, 1), model_type="tft", config={},
                                  extra={"train_config": train_config(tft).to_dict()})
    without = save_checkpoint(tmp_path / "old", nn.Linear(1, 1), model_type="tft", config={})
    mlflow = MLflowResource(home=str(foxhunt_home))
    with mlflow.start_run("tft") as run:
        run.log_params({"train": tft.model_dump()})
    # saved with the weights: nothing else is read
    assert production_settings("tft", None, mlflow, run.run_id, with_config, "cpu") is None
    assert production_settings("tft", None, mlflow, run.run_id, without, "cpu") == \
        train_config(tft)
    with mlflow.start_run("empty") as empty:
        pass
    assert production_settings("tft", None, mlflow, empty.run_id, without, "cpu") == \
        train_config(TFTTrainingConfig())


def test_agent_config_from_its_policy_directory(foxhunt_home, tmp_path):
    """An agent's walk-forward retrains with the config saved beside its policy, not with
    MLflow's string parameters (read only for a policy saved before configs were kept)."""
    ppo = agent_config("ppo", PPOTrainingConfig(total_timesteps=4096, net_arch=[16, 8],
                                                cost_multiplier=2.0), "cpu")
    mlflow = MLflowResource(home=str(foxhunt_home))
    with mlflow.start_run("ppo") as run:
        run.log_params({"agent": {**ppo.to_dict(), "total_timesteps": 1}, "device": "cpu"})
    new, old = tmp_path / "new", tmp_path / "old"
    new.mkdir(), old.mkdir()
    save_agent_config(ppo, new)
    saved = production_settings("ppo", None, mlflow, run.run_id, new, "cpu")
    assert saved == ppo
    assert production_settings("ppo", None, mlflow, run.run_id, old, "cpu").total_timesteps == 1
    assert production_candidate("ppo", new, saved).name == "foxhunt-ppo"
