"""The forecaster training assets' Dagster Configs (``TrainConfig``'s fields and each
family's model fields, defaults delegated to the library) and the ``TrainConfig`` they
make: what training runs, what the walk-forward retrains per fold, what a tuning trial runs."""

import dagster as dg
from pydantic import Field

from assets.common import EAGER_AFTER_CHECKS, OWNERS
from assets.common.config_fields import delegated, sized
from foxhunt_pipeline.config import deploy_profile
from models.mamba2.model import Mamba2Config
from models.tft.model import TFTConfig
from models.training.loop import TrainConfig, train_fields

GPU_POOL = "gpu"


TRANSIENT_RETRY = dg.RetryPolicy(max_retries=1, delay=5)


def _training_fields(section: str) -> type[dg.Config]:
    """The ``TrainConfig`` fields both forecasters' Configs share, sized by ``section``."""

    class TrainingFields(dg.Config):
        epochs: int = delegated(TrainConfig, "epochs", "Passes over the training windows at "
                                "most.", section=section)
        batch_size: int = delegated(TrainConfig, "batch_size", "Windows per optimizer step "
                                    "(the global batch under DDP).", section=section)
        learning_rate: float = sized(section, "learning_rate", TrainConfig.lr,
                                     "AdamW peak learning rate (TrainConfig.lr).")
        weight_decay: float = delegated(TrainConfig, "weight_decay",
                                        "AdamW decoupled weight decay.", section=section)
        grad_clip: float = delegated(TrainConfig, "grad_clip",
                                     "Gradient L2-norm clipping threshold.")
        patience: int = delegated(TrainConfig, "patience", "Epochs without validation "
                                  "improvement before early stopping.")
        max_batches_per_epoch: int = sized(section, "max_batches_per_epoch", 0,
                                           "Cap on optimizer steps per epoch (0: all).")
        val_windows: int = sized(section, "val_windows", 16_384,
                                 "Validation windows scored per epoch: a fixed sample when "
                                 "the split has more (the whole split is scored once at the "
                                 "end); 0: all, every epoch.")
        seed: int = delegated(TrainConfig, "seed", "Seed of batch order, dropout and weights.")
        use_tuned: bool = Field(default=True, description="Take the newest study's best "
                                "parameters (FAMILY_tuning) for the fields this config does not set.")

    return TrainingFields


class TFTTrainingConfig(_training_fields("tft_model")):
    hidden: int = delegated(TFTConfig, "hidden", "Model width.", section="tft_model")
    dropout: float = delegated(TFTConfig, "dropout", "Dropout probability.")
    heads: int = delegated(TFTConfig, "heads", "Attention heads.", section="tft_model")
    lstm_layers: int = delegated(TFTConfig, "lstm_layers", "LSTM encoder/decoder layers.",
                                 section="tft_model")
    var_width: int = delegated(TFTConfig, "var_width", "Variable-selection hidden width.",
                               section="tft_model")
    members: int = delegated(TFTConfig, "members", "TFTs trained one after another, each "
                             "with its own seed, their quantiles averaged (a deep ensemble; "
                             "each costs a TFT's training and inference).", section="tft_model")
    nproc_per_node: int = Field(default=1, description="Ranks; > 1: torch DDP under torchrun, "
                                "launched through Dagster Pipes.")


class Mamba2TrainingConfig(_training_fields("mamba2_model")):
    hidden: int = delegated(Mamba2Config, "hidden", "Model width (d_model).",
                            section="mamba2_model")
    dropout: float = delegated(Mamba2Config, "dropout", "Dropout probability.")
    n_layers: int = delegated(Mamba2Config, "n_layers", "Mamba-2 blocks.", section="mamba2_model")
    d_state: int = delegated(Mamba2Config, "d_state", "SSM state size per head.")
    chunk_size: int = delegated(Mamba2Config, "chunk_size", "SSD scan chunk length.")
    nproc_per_node: int = Field(default=1, description="Ranks; > 1: torch DDP under torchrun, "
                                "launched through Dagster Pipes.")


ForecasterTrainingConfig = TFTTrainingConfig | Mamba2TrainingConfig


#: the training asset's Config of each torch forecaster family
FORECASTER_CONFIGS: dict[str, type[dg.Config]] = {"tft": TFTTrainingConfig,
                                                   "mamba2": Mamba2TrainingConfig}


def train_config(config: ForecasterTrainingConfig, **overrides) -> TrainConfig:
    """The library's ``TrainConfig`` for an asset Config: what training runs, what the
    walk-forward retrains per fold and (with ``overrides``) what a tuning trial runs."""
    fields = dict(epochs=config.epochs, batch_size=config.batch_size,
                  learning_rate=config.learning_rate, weight_decay=config.weight_decay,
                  grad_clip=config.grad_clip, patience=config.patience, seed=config.seed,
                  max_batches_per_epoch=config.max_batches_per_epoch or None,
                  val_windows=config.val_windows or None)
    return TrainConfig(**train_fields({**fields, **overrides}))


def logged_train_config(family: str, logged: dict) -> TrainConfig:
    """The ``TrainConfig`` of a training whose asset Config was logged as ``logged`` (the
    active profile's defaults for what it did not log)."""
    cls = FORECASTER_CONFIGS[family]
    return train_config(cls(**{k: v for k, v in logged.items() if k in cls.model_fields}))


#: the decorator arguments every training asset shares (each names its own deps)
TRAINING_KW = dict(
    group_name="training",
    owners=OWNERS,
    pool=GPU_POOL,
    automation_condition=EAGER_AFTER_CHECKS,
    retry_policy=TRANSIENT_RETRY,
    # read only by dagster-k8s: GPU requests and node selector for training pods
    op_tags=deploy_profile.training_op_tags(),
)
