"""Training assets: one per model, each on the ``gpu`` pool, requested once per new
training_dataset by declarative automation and weekly by the retraining schedule."""

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field

from assets.common import EAGER_AFTER_CHECKS, OWNERS, code_version_of, registration
from assets.common.config_fields import delegated, sized
from assets.common.ddp_worker import model_config_for
from assets.common.distributed_training import launch_ddp_training
from assets.common.interpretability import tft_interpretability
from assets.common.metadata_images import image_md
from assets.common.tuned_params import with_tuned_params
from assets.features import training_dataset
from foxhunt_pipeline.config import deploy_profile
from foxhunt_pipeline.config.settings import current_settings
from foxhunt_pipeline.storage import dataset_store, model_store
from models import families
from models.mamba2.model import Mamba2Config
from models.registry import seeded_model
from models.tft.model import TFTConfig
from models.training.checkpoint import save_checkpoint
from models.training.loop import (
    TrainConfig,
    TrainingDivergedError,
    train_fields,
    train_forecaster,
)
from models.windows import TrainingData
from resources.mlflow_tracking import MLflowResource, TrackedRun
from resources.storage import FoxhuntStorage
from resources.torch_device import TorchDevice

GPU_POOL = "gpu"
TRANSIENT_RETRY = dg.RetryPolicy(max_retries=1, delay=5)


def deterministic_failure(family: str, error: Exception) -> dg.Failure:
    """A failure that the same data and settings would repeat: not retried, so the
    TRANSIENT_RETRY policy (meant for a lost node or device) does not rerun it."""
    return dg.Failure(
        description=f"{family}: {error}. Not retried: the same dataset and settings fail the "
        "same way; check the training_dataset_finite check, or lower learning_rate / set "
        "grad_clip",
        allow_retries=False,
    )


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
#: a family's own interpretability after training: (run, checkpoint, data, out_dir) -> metadata
Interpretation = Callable[[TrackedRun, Path, TrainingData, Path], dict]


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


def _dataset_path(storage: FoxhuntStorage) -> Path:
    try:
        return dataset_store.local_dir(storage.warehouse_root, storage.scratch / "cache")
    except FileNotFoundError as e:
        raise dg.Failure(f"{e}: materialize training_dataset first") from e


def load_dataset(storage: FoxhuntStorage) -> TrainingData:
    """The current training dataset, copied locally when it lives on object storage."""
    return TrainingData.load(_dataset_path(storage))


def load_current_model(storage: FoxhuntStorage, family: str) -> tuple[dict, Path]:
    """The family's current pointer with ``checkpoint`` naming a local copy (what the
    loaders need), and the local run directory that outputs are written beside."""
    try:
        pointer, checkpoint, run_dir = storage.current_model(family)
    except FileNotFoundError as e:
        raise dg.Failure(str(e)) from e
    return {**pointer, "checkpoint": str(checkpoint)}, run_dir


def new_run_dir(storage: FoxhuntStorage, family: str, run_id: str) -> Path:
    """A fresh local directory for one training run (inside the checkpoints root when local)."""
    name = f"{time.strftime('%Y%m%dT%H%M%S')}-{run_id[:8]}"
    return model_store.work_dir(storage.checkpoints_root, storage.scratch, family, name)


def publish_run(storage: FoxhuntStorage, family: str, run_dir: Path, checkpoint: Path,
                record: dict) -> str:
    """Store the finished run directory, then point the family at it; returns the run
    directory's durable location (a path, or a URL on object storage)."""
    where = model_store.store_run(storage.checkpoints_root, family, run_dir)
    model_store.publish(storage.checkpoints_root, family, {
        "family": family, "checkpoint": model_store.located(where, run_dir, checkpoint),
        "run_dir": where, **record})
    return where


def train_forecaster_asset(
    context: dg.AssetExecutionContext,
    family: str,
    model_params: dict,
    config: ForecasterTrainingConfig,
    storage: FoxhuntStorage,
    mlflow: MLflowResource,
    torch_device: TorchDevice,
    pipes_subprocess_client: dg.PipesSubprocessClient | None = None,
    hyperparameters_from: str = "Config",
    interpret: Interpretation | None = None,
) -> dg.MaterializeResult:
    """Shared by tft_model and mamba2_model: build, train with MLflow logging, checkpoint,
    register a model version, publish the pointer evaluation reads. ``interpret`` adds a
    family's own interpretability (the TFT's attention and variable selection)."""
    data = load_dataset(storage)
    choice = torch_device.choose()
    model_config = model_config_for(family, data, model_params)
    train_cfg = train_config(config)
    registered = families.family(family).registered_name
    run_dir = new_run_dir(storage, family, context.run.run_id)
    profile = current_settings().profile
    fit = _Fit(family, model_params, model_config, train_cfg, config.nproc_per_node, choice)
    with mlflow.start_run(f"{family}-{context.run.run_id[:8]}", tags={"family": family, "dagster_run_id": context.run.run_id}) as run:
        run.log_params({"model": model_config, "train": config.model_dump(), "device": choice.name,
                        "feature_hash": data.meta["feature_hash"]})
        run.set_tags({"hyperparameters_from": hyperparameters_from})
        on_epoch_end = _epoch_logger(context, run, family, config.epochs,
                                     getattr(config, "members", 1), profile)
        result, ckpt = _fit_forecaster(context, fit, data, storage, run_dir, on_epoch_end,
                                       pipes_subprocess_client)
        curve, extra_metadata = _log_training(run, family, result, ckpt, data, run_dir, interpret)
        version = _register_forecaster(run, family, registered, ckpt, data, storage, result,
                                       run_dir, profile)
        run_id = run.run_id
    where = publish_run(storage, family, run_dir, ckpt, {
        "mlflow_run_id": run_id, "registered_model": registered, "version": version,
        "dagster_run_id": context.run.run_id, "feature_hash": data.meta["feature_hash"],
    })
    return dg.MaterializeResult(
        metadata={
            **_result_metadata(result),
            "device": choice.name,
            "hyperparameters_from": hyperparameters_from,
            **_mlflow_metadata(mlflow, run_id, registered, version),
            "profile": profile,
            "checkpoint": dg.MetadataValue.path(model_store.located(where, run_dir, ckpt)),
            "loss_curve": image_md(curve, f"{family} loss curve"),
            **(extra_metadata or {}),
        }
    )


def _result_metadata(result: Any) -> dict:
    """What the training reached: its best validation loss, epochs, size and speed."""
    last = result.history[-1] if result.history else {}
    full = getattr(result, "full_val_loss", None)  # epochs scored a sample of the split
    return {
        "val_loss": float(result.best_val_loss),
        **({"val_loss_full_split": float(full)} if full is not None else {}),
        "epochs": dg.MetadataValue.int(int(result.epochs_run)),
        "parameters": dg.MetadataValue.int(int(result.n_parameters)),
        "training_seconds": round(float(result.training_seconds), 2),
        "samples_per_s": round(float(last.get("samples_per_s", 0.0)), 1),
    }


def _mlflow_metadata(mlflow: MLflowResource, run_id: str, registered: str, version: str) -> dict:
    """Where the training run and its registered version are, for the asset's metadata."""
    return {
        "mlflow_run_id": run_id,
        "mlflow_run": dg.MetadataValue.url(mlflow.run_url(run_id)),
        "mlflow_ui": f"mlflow ui --backend-store-uri {mlflow.resolved_uri()}",
        "registered_model": f"{registered} v{version}",
        "model_uri": f"models:/{registered}/{version}",
    }


@dataclass(frozen=True)
class _Fit:
    """What one forecaster training fits: the model, its optimisation and where it runs."""

    family: str
    model_params: dict
    model_config: dict
    train_cfg: TrainConfig
    nproc_per_node: int
    choice: Any  # resources.torch_device's DeviceChoice


def _epoch_logger(context: dg.AssetExecutionContext, run: TrackedRun, family: str, epochs: int,
                  members: int, profile: str) -> Callable[[dict], None]:
    """Per epoch: its metrics to MLflow and a progress line to the Dagster log. A deep
    ensemble's members train one after another: member ``i``'s epochs are MLflow steps
    ``i * epochs + epoch``, so each member's curve follows the last one's."""
    started = time.monotonic()

    def on_epoch_end(row: dict) -> None:
        member = int(row.get("member", 0))
        step = member * epochs + int(row["epoch"])
        run.log_metrics({k: v for k, v in row.items() if k not in ("epoch", "member")}, step=step)
        which = f" member {member + 1}/{members}" if members > 1 else ""
        context.log.info(
            f"{family}{which} epoch {row['epoch']}/{epochs}: train {row.get('train_loss', float('nan')):.5f} "
            f"val {row.get('val_loss', float('nan')):.5f} grad_norm {row.get('grad_norm', float('nan')):.3f}"
            f"{progress_note(step, epochs * members, time.monotonic() - started)} [profile {profile}]"
        )

    return on_epoch_end


def _fit_forecaster(context: dg.AssetExecutionContext, fit: _Fit, data: TrainingData,
                    storage: FoxhuntStorage, run_dir: Path, on_epoch_end: Callable[[dict], None],
                    pipes_client: dg.PipesSubprocessClient | None) -> tuple[Any, Path]:
    """Train in this process, or under torchrun with ``nproc_per_node`` > 1; returns the
    result (history, losses, sizes) and the checkpoint."""
    if fit.nproc_per_node > 1:
        result = _fit_ddp(context, pipes_client, fit.family, fit.model_params, fit.train_cfg,
                          storage, run_dir, fit.nproc_per_node, fit.choice)
        for row in result.history:
            on_epoch_end(row)
        return result, Path(result.checkpoint)
    model = seeded_model(fit.family, fit.model_config, fit.train_cfg.seed)
    try:
        result = train_forecaster(
            model, data, fit.train_cfg, device=fit.choice.device,
            autocast_dtype=fit.choice.autocast_dtype,
            checkpoint_dir=run_dir / "train_state", on_epoch_end=on_epoch_end,
        )
    except TrainingDivergedError as e:
        raise deterministic_failure(fit.family, e) from e
    # the training config travels with the weights: the agents that observe this
    # model retrain it per walk-forward fold with it (and share the fold-model cache)
    ckpt = save_checkpoint(
        run_dir / "model", model, model_type=fit.family, config=fit.model_config,
        extra={**dataset_extra(data), "train_config": fit.train_cfg.to_dict()},
    )
    return result, ckpt


def _log_training(run: TrackedRun, family: str, result: Any, ckpt: Path, data: TrainingData,
                  run_dir: Path, interpret: Interpretation | None) -> tuple[Path, dict]:
    """The checkpoint, loss curve, final metrics and (``interpret``) interpretability to the
    MLflow run; returns the curve and the interpretability's metadata."""
    run.log_artifacts(ckpt if ckpt.is_dir() else ckpt.parent, "checkpoint")
    curve = _loss_curve_png(result.history, run_dir / "loss_curve.png", family)
    run.log_artifact(curve, "plots")
    run.log_metrics({"best_val_loss": result.best_val_loss, "training_seconds": result.training_seconds,
                     "n_parameters": result.n_parameters})
    extra_metadata = interpret(run, ckpt, data, run_dir / "interpretability") if interpret else {}
    return curve, extra_metadata


def _register_forecaster(run: TrackedRun, family: str, registered: str, ckpt: Path,
                         data: TrainingData, storage: FoxhuntStorage, result: Any, run_dir: Path,
                         profile: str) -> str:
    """The serving export registered as a new version of ``registered``; returns the version."""
    serving = registration.export_forecaster(family, ckpt, data, run_dir / "serving")
    version = registration.register(
        run, family, registered, serving, data, storage, profile=profile,
        metrics={"best_val_loss": float(result.best_val_loss), "epochs": int(result.epochs_run),
                 "n_parameters": int(result.n_parameters)})
    run.set_tags({"precision": "fp32", "registered_version": version, "profile": profile})
    return version


def progress_note(done: float, total: float, elapsed_s: float) -> str:
    """``, 40% done, ~1m30s left`` (at most the whole budget: early stopping can end sooner)."""
    if total <= 0 or done <= 0:
        return ""
    left = elapsed_s * max(total - done, 0) / done
    return f", {min(done / total, 1.0):.0%} done, ~{_duration(left)} left"


def _duration(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


class _DDPResult:
    """The rank-0 result of a torchrun launch, shaped like models.training.loop.TrainResult."""

    def __init__(self, r: dict):
        self.history = list(r.get("history", []))
        self.best_val_loss = float(r["best_val_loss"])
        self.epochs_run = int(r["epochs_run"])
        self.n_parameters = int(r["n_parameters"])
        self.training_seconds = float(r["training_seconds"])
        self.checkpoint = r["checkpoint"]


def _fit_ddp(context, pipes_client, family, model_params, train_cfg, storage, run_dir, nproc, choice):
    if pipes_client is None:
        raise dg.Failure("nproc_per_node > 1 needs the pipes_subprocess_client resource")
    autocast = str(choice.autocast_dtype).removeprefix("torch.") if choice.autocast_dtype else None
    r = launch_ddp_training(context, pipes_client, family, model_params, train_cfg.to_dict(),
                            _dataset_path(storage), run_dir / "ddp", nproc,
                            device=choice.device.type, autocast=autocast)
    return _DDPResult(r)


def dataset_extra(data: TrainingData) -> dict:
    """What a checkpoint records about the dataset it was trained on (names, scale, shape)."""
    return {
        "observed_names": data.observed_names, "known_names": data.known_names,
        "static_names": data.static_names, "feature_hash": data.meta["feature_hash"],
        "target_scale": data.target_scale, "lookback": data.lookback, "horizon": data.horizon,
    }


def _loss_curve_png(history: list[dict], path: Path, title: str) -> Path:
    # lazy: matplotlib is not needed to load the code location, only to draw
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    members = sorted({int(h.get("member", 0)) for h in history}) or [0]
    for member in members:  # a deep ensemble: one pair of curves per member
        rows = [h for h in history if int(h.get("member", 0)) == member]
        which = f" (member {member + 1})" if len(members) > 1 else ""
        for key in ("train_loss", "val_loss"):
            ax.plot([h["epoch"] for h in rows], [h.get(key) for h in rows], marker="o",
                    label=key + which)
    ax.set_xlabel("epoch")
    ax.set_ylabel("quantile loss")
    ax.set_title(f"{title} training")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


TRAINING_KW = dict(
    deps=[training_dataset],
    group_name="training",
    owners=OWNERS,
    pool=GPU_POOL,
    automation_condition=EAGER_AFTER_CHECKS,
    retry_policy=TRANSIENT_RETRY,
    # read only by dagster-k8s: GPU requests and node selector for training pods
    op_tags=deploy_profile.training_op_tags(),
)
# The gpu pool trains one model at a time, by default in step-name order (the TFT last): a new
# dataset trains the TFT first, the forecaster whose plots and interpretability a user opens first.
FIRST_IN_POOL = {"dagster/priority": "1"}


@dg.asset(
    kinds={"pytorch", "mlflow"},
    code_version=code_version_of("models.tft.model", "models.training.loop", "models.quantile"),
    description="Temporal Fusion Transformer (Lim et al. 2021) quantile forecaster; checkpoint, "
    "MLflow run and registered version `foxhunt-tft`.",
    **{**TRAINING_KW, "op_tags": {**TRAINING_KW["op_tags"], **FIRST_IN_POOL}},
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
    **TRAINING_KW,
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
