"""Agent training assets: DQN and PPO (stable-baselines3) deciding on what the forecasters
know (``models.agents.state``: the current tft_model's and mamba2_model's quantiles, a few
features and the cost), on the ``gpu`` pool like the forecasters, requested once the dataset
and the forecasters they observe are new."""

import dagster as dg

from assets.common import code_version_of
from assets.common.agent_configs import DQNTrainingConfig, PPOTrainingConfig
from assets.common.agent_training import train_agent_asset
from assets.common.training_configs import TRAINING_KW
from assets.features import training_dataset
from assets.training import mamba2_model, tft_model
from models.agents import forecast_memo
from resources.mlflow_tracking import MLflowResource
from resources.storage import FoxhuntStorage
from resources.torch_device import TorchDevice

AGENT_KW = {**TRAINING_KW, "deps": [training_dataset, tft_model, mamba2_model]}


@dg.asset(
    kinds={"pytorch", "mlflow"},
    code_version=code_version_of("models.agents.train", "models.agents.trading_env",
                                 "models.agents.policy", "models.agents.state",
                                 "models.agents.replay"),
    description="DQN trading agent (stable-baselines3) deciding on the forecasters' quantiles, "
    "recent returns and volatility and its cost: short / flat / long, next-bar fills, costs in "
    "ticks; registered as `foxhunt-dqn`.",
    **AGENT_KW,
)
def dqn_agent(context: dg.AssetExecutionContext, config: DQNTrainingConfig, storage: FoxhuntStorage,
              mlflow: MLflowResource, torch_device: TorchDevice) -> dg.MaterializeResult:
    with forecast_memo.on_disk(storage.forecast_cache):
        return train_agent_asset(context, "dqn", config, storage, mlflow, torch_device)


@dg.asset(
    kinds={"pytorch", "mlflow"},
    code_version=code_version_of("models.agents.train", "models.agents.trading_env",
                                 "models.agents.policy", "models.agents.state",
                                 "models.agents.replay"),
    description="PPO actor-critic trading agent (stable-baselines3, vectorised envs) deciding on "
    "the forecasters' quantiles, recent returns and volatility and its cost; registered as "
    "`foxhunt-ppo`.",
    **AGENT_KW,
)
def ppo_agent(context: dg.AssetExecutionContext, config: PPOTrainingConfig, storage: FoxhuntStorage,
              mlflow: MLflowResource, torch_device: TorchDevice) -> dg.MaterializeResult:
    with forecast_memo.on_disk(storage.forecast_cache):
        return train_agent_asset(context, "ppo", config, storage, mlflow, torch_device)
