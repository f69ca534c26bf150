"""The forecaster training assets' shared body: build, train (in process or under torchrun)
with MLflow logging, checkpoint, register a model version, publish the pointer the
evaluation reads."""

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from assets.common import registration
from assets.common.distributed_training import fit_ddp
from assets.common.metadata_images import image_md
from assets.common.model_runs import deterministic_failure, load_dataset, new_run_dir, publish_run
from assets.common.training_configs import ForecasterTrainingConfig, train_config
from foxhunt_pipeline.config.settings import current_settings
from foxhunt_pipeline.storage import model_store
from models import families
from models.registry import seeded_model
from models.training.checkpoint import save_checkpoint
from models.training.dataset_extra import dataset_extra
from models.training.ddp_protocol import model_config_for
from models.training.loop import TrainConfig, TrainingDivergedError, train_forecaster
from models.training.loss_curve import loss_curve_png
from models.training.progress import progress_note
from models.windows import TrainingData
from resources.mlflow_tracking import MLflowResource, TrackedRun
from resources.storage import FoxhuntStorage
from resources.torch_device import TorchDevice

#: a family's own interpretability after training: (run, checkpoint, data, out_dir) -> metadata
Interpretation = Callable[[TrackedRun, Path, TrainingData, Path], dict]


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
        result = fit_ddp(context, pipes_client, fit.family, fit.model_params, fit.train_cfg,
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
    curve = loss_curve_png(result.history, run_dir / "loss_curve.png", family)
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
