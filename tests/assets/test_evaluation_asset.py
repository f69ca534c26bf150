"""The evaluation asset retrains each fold with the configuration the production run logged
to MLflow: the logged parameters come back as the same training configs."""

from __future__ import annotations

from assets.agents import PPOTrainingConfig, agent_config
from assets.evaluation import family_candidate, training_params
from assets.training import TFTTrainingConfig
from models.agents import train as agents
from models.agents.trading_env import EnvConfig
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
    assert family_candidate("ppo", None, "cpu", logged).name == "foxhunt-ppo"
    assert family_candidate("dqn", None, "cpu", {}).name == "foxhunt-dqn"  # nothing logged
    back = training_params(mlflow, tft_run, "train")
    assert TFTTrainingConfig(**back) == tft
