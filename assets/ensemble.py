"""The ensemble (``ensemble_model``, group ``training``): the current forecasters' quantiles
combined with weights fitted on the validation split (rule in ``models.ensemble.weights``),
registered as ``foxhunt-ensemble`` and published like any forecaster, so
``ensemble_evaluation`` and ``ensemble_quantized`` are the single models' evaluation and
quantization, and the leaderboard ranks it with them: it becomes champion only by beating
them and every baseline."""

from pathlib import Path

import dagster as dg

from assets.common import EAGER_AFTER_CHECKS, OWNERS, code_version_of, registration
from assets.common.config_fields import sized
from assets.common.evaluation_asset import evaluation_asset
from assets.common.model_runs import load_dataset, new_run_dir, publish_run
from assets.common.quantized_asset import quantized_asset
from assets.common.training_configs import GPU_POOL, TRANSIENT_RETRY
from assets.training import mamba2_model, tft_model
from foxhunt_pipeline.config import deploy_profile
from foxhunt_pipeline.config.settings import current_settings
from foxhunt_pipeline.storage import model_store
from models import families
from models.ensemble.model import build_ensemble
from models.ensemble.weights import fit_quantile_weights, sole_member
from models.training.checkpoint import load_checkpoint, save_checkpoint
from models.training.dataset_extra import dataset_extra
from models.training.loop import (
    climatology_quantiles,
    predict_quantiles,
    scaled_targets,
    validation_sample,
)
from models.windows import TrainingData
from resources.mlflow_tracking import MLflowResource
from resources.storage import FoxhuntStorage
from resources.torch_device import TorchDevice

MEMBERS = families.family("ensemble").members


class EnsembleConfig(dg.Config):
    include_climatology: bool = True  # the training split's climatology as one more member
    val_windows: int = sized("ensemble_model", "val_windows", 0, "Validation windows the "
                             "weights are fitted on: a fixed sample (the training loop's) when "
                             "the split has more, so a year costs what a month does; 0: all.")


def composition_notes(weights: dict) -> list[str]:
    """What the ensemble is when its weights put all mass on one member: that member, said
    on its model card and asset page ("ensemble = climatology")."""
    member = sole_member(weights)
    if member is None:
        return []
    what = "baseline:climatology" if member == "climatology" else f"foxhunt-{member}"
    return [f"ensemble = {member}: all weight on {what} on the validation split, so it "
            f"forecasts exactly what {what} does; the leaderboard shows it as such and never "
            "offers it as champion over it"]


@dg.asset(
    deps=[tft_model, mamba2_model],
    group_name="training",
    kinds={"pytorch", "mlflow"},
    owners=OWNERS,
    pool=GPU_POOL,
    automation_condition=EAGER_AFTER_CHECKS,
    retry_policy=TRANSIENT_RETRY,
    op_tags=deploy_profile.training_op_tags(),
    code_version=code_version_of("models.ensemble.weights", "models.ensemble.model"),
    description="Ensemble of the forecasters' quantiles (and the climatology) with non-negative "
    "weights summing to 1 that minimise the validation pinball loss; registered as "
    "`foxhunt-ensemble`, evaluated and ranked like the single models.",
)
def ensemble_model(context: dg.AssetExecutionContext, config: EnsembleConfig, storage: FoxhuntStorage,
                   mlflow: MLflowResource, torch_device: TorchDevice) -> dg.MaterializeResult:
    data = load_dataset(storage)
    device = torch_device.choose().device
    val = validation_sample(data.window_dataset("validation"), config.val_windows or None)
    quantiles = list(data.meta["quantiles"])
    members, preds, sources = _current_members(context, storage, val, device)
    clim = climatology_quantiles(data, tuple(quantiles))
    if config.include_climatology:
        preds["climatology"] = clim
    fitted = fit_quantile_weights(preds, scaled_targets(val), quantiles)
    model = build_ensemble(list(preds), fitted.weights, {k: m.cpu() for k, m in members.items()},
                           horizon=data.horizon, quantiles=quantiles, climatology=clim, lookback=data.lookback)
    run_dir = new_run_dir(storage, "ensemble", context.run.run_id)
    ckpt = save_checkpoint(run_dir / "model", model, model_type="ensemble", config=model.config.to_dict(),
                           extra={**dataset_extra(data), "weights": fitted.weights, "members": sources,
                                  "validation_pinball": fitted.member_losses})
    registered = families.family("ensemble").registered_name
    run_id, version = _log_and_register(context, mlflow, storage, data, fitted, sources, ckpt,
                                        run_dir, registered)
    where = publish_run(storage, "ensemble", run_dir, ckpt, {
        "mlflow_run_id": run_id, "registered_model": registered, "version": version,
        "dagster_run_id": context.run.run_id, "feature_hash": data.meta["feature_hash"],
    })
    best_single = min((v, k) for k, v in fitted.member_losses.items() if k != "climatology")
    return dg.MaterializeResult(metadata={
        "composition": " ".join(composition_notes(fitted.weights)) or "a blend of its members",
        "weights": dg.MetadataValue.json(fitted.weights),
        "weights_rule": "non-negative, sum to 1, minimise the pooled pinball loss on the validation split "
                        f"(winner: {fitted.method})",
        "members": dg.MetadataValue.json(sources),
        "val_loss": float(fitted.loss),
        "validation_windows": dg.MetadataValue.int(len(val)),
        "val_loss_members": dg.MetadataValue.json(fitted.member_losses),
        "val_loss_best_single": f"{best_single[1]}: {best_single[0]:.6g}",
        "registered_model": f"{registered} v{version}",
        "mlflow_run_id": run_id,
        "checkpoint": dg.MetadataValue.path(model_store.located(where, run_dir, ckpt)),
    })


def _current_members(context: dg.AssetExecutionContext, storage: FoxhuntStorage, val,
                     device) -> tuple[dict, dict, dict]:
    """The current member forecasters (a missing one is left out, with a warning), their
    validation quantiles and the registered version each came from."""
    members, preds, sources = {}, {}, {}
    for family in MEMBERS:
        try:
            pointer, checkpoint, _ = storage.current_model(family)
        except FileNotFoundError:
            context.log.warning(f"ensemble: no current {family} model, left out")
            continue
        model, _ = load_checkpoint(checkpoint, device=device)
        members[family], sources[family] = model, f"{pointer['registered_model']} v{pointer['version']}"
        preds[family] = predict_quantiles(model, val, device=device)
    if not members:
        raise dg.Failure("ensemble_model needs at least one current forecaster: materialize tft_model or mamba2_model")
    return members, preds, sources


def _log_and_register(context: dg.AssetExecutionContext, mlflow: MLflowResource,
                      storage: FoxhuntStorage, data: TrainingData, fitted, sources: dict,
                      ckpt: Path, run_dir: Path, registered: str) -> tuple[str, str]:
    """The ensemble's MLflow run (weights, losses, checkpoint) and its registered pyfunc
    version; returns (run id, version)."""
    with mlflow.start_run(f"ensemble-{context.run.run_id[:8]}",
                          tags={"family": "ensemble", "dagster_run_id": context.run.run_id}) as run:
        run.log_params({"weights": fitted.weights, "members": sources, "rule": "simplex, min validation pinball",
                        "feature_hash": data.meta["feature_hash"]})
        run.log_metrics({"val_loss": fitted.loss, **{f"val_loss_{k}": v for k, v in fitted.member_losses.items()}})
        run.log_artifacts(ckpt.parent, "checkpoint")
        # a pyfunc model like the single forecasters': models:/foxhunt-ensemble@champion loads
        serving = registration.export_forecaster("ensemble", ckpt, data, run_dir / "serving")
        version = registration.register(run, "ensemble", registered, serving, data, storage,
                                        profile=current_settings().profile,
                                        metrics={"val_loss": float(fitted.loss)},
                                        notes=composition_notes(fitted.weights))
        run.set_tags({"precision": "fp32", "registered_version": version})
        return run.run_id, version


# after the members' evaluations: their fold models are reused, not trained again
ensemble_evaluation = evaluation_asset("ensemble", "ensemble_model",
                                        after=tuple(f"{m}_evaluation" for m in MEMBERS))
ensemble_quantized = quantized_asset("ensemble")
