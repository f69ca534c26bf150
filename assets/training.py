"""Training assets: one per model, each on the ``gpu`` pool, requested once per new
training_dataset by declarative automation and weekly by the retraining schedule."""

import dagster as dg

from assets.common import code_version_of
from assets.common.forecaster_training import train_forecaster_asset
from assets.common.interpretability import tft_interpretability
from assets.common.training_configs import TRAINING_KW, Mamba2TrainingConfig, TFTTrainingConfig
from assets.common.tuned_params import with_tuned_params
from assets.features import training_dataset
from resources.mlflow_tracking import MLflowResource
from resources.storage import FoxhuntStorage
from resources.torch_device import TorchDevice

FORECASTER_KW = {**TRAINING_KW, "deps": [training_dataset]}
# The gpu pool trains one model at a time, by default in step-name order (the TFT last): a new
# dataset trains the TFT first, the forecaster whose plots and interpretability a user opens first.
FIRST_IN_POOL = {"dagster/priority": "1"}


@dg.asset(
    kinds={"pytorch", "mlflow"},
    code_version=code_version_of("models.tft.model", "models.training.loop", "models.quantile"),
    description="Temporal Fusion Transformer (Lim et al. 2021) quantile forecaster; checkpoint, "
    "MLflow run and registered version `foxhunt-tft`.",
    **{**FORECASTER_KW, "op_tags": {**TRAINING_KW["op_tags"], **FIRST_IN_POOL}},
)
def tft_model(
    context: dg.AssetExecutionContext, config: TFTTrainingConfig, storage: FoxhuntStorage,
    mlflow: MLflowResource, torch_device: TorchDevice, pipes_subprocess_client: dg.PipesSubprocessClient,
) -> dg.MaterializeResult:
    config, source = with_tuned_params("tft", config, storage)
    params = {"hidden": config.hidden, "heads": config.heads, "lstm_layers": config.lstm_layers,
              "dropout": config.dropout, "var_width": config.var_width, "members": config.members}
    return train_forecaster_asset(context, "tft", params, config, storage, mlflow, torch_device,
                                  pipes_subprocess_client, hyperparameters_from=source,
                                  interpret=tft_interpretability)


@dg.asset(
    kinds={"pytorch", "mlflow"},
    code_version=code_version_of("models.mamba2.model", "models.mamba2.ssd", "models.training.loop"),
    description="Mamba-2 (SSD chunked scan, pure PyTorch) quantile forecaster; registered as "
    "`foxhunt-mamba2`.",
    **FORECASTER_KW,
)
def mamba2_model(
    context: dg.AssetExecutionContext, config: Mamba2TrainingConfig, storage: FoxhuntStorage,
    mlflow: MLflowResource, torch_device: TorchDevice, pipes_subprocess_client: dg.PipesSubprocessClient,
) -> dg.MaterializeResult:
    config, source = with_tuned_params("mamba2", config, storage)
    params = {"hidden": config.hidden, "n_layers": config.n_layers, "d_state": config.d_state,
              "chunk_size": config.chunk_size, "dropout": config.dropout}
    return train_forecaster_asset(context, "mamba2", params, config, storage, mlflow, torch_device,
                                  pipes_subprocess_client, hyperparameters_from=source)
