"""One evaluation asset's body: the production model's own test split (plots, running cost),
then the walk-forward skill claim, stored in model_evaluations, the model's MLflow run and
the asset's metadata."""

from datetime import UTC, datetime
from pathlib import Path

import dagster as dg

from assets.common import report_warnings
from assets.common.evaluation_config import EvaluationConfig
from assets.common.metadata_images import pngs_md
from assets.common.model_runs import load_current_model, load_dataset
from assets.common.production_settings import production_settings
from assets.common.walk_forward import run_walk_forward, scored_baselines, store_bars
from foxhunt_pipeline.features.coverage import fold_warnings
from models import families
from models.evaluation.compared import composition_equals
from models.evaluation.evaluation_table import evaluation_rows, float_or_none
from models.evaluation.production_report import production_report
from models.evaluation.walk_forward_report import (
    folds_markdown,
    walk_forward_chart,
    walk_forward_markdown,
)
from resources.mlflow_tracking import MLflowResource, TrackedRun
from resources.storage import EVALUATIONS_TABLE, FoxhuntStorage
from resources.torch_device import TorchDevice


def _meta_float(v) -> dg.MetadataValue:
    """A metric for asset metadata: the number, or "-" when it is undefined (never 0)."""
    f = float_or_none(v)
    return dg.MetadataValue.float(f) if f is not None else dg.MetadataValue.text("-")


def evaluate_family(family: str, context: dg.AssetExecutionContext, config: EvaluationConfig,
              storage: FoxhuntStorage, mlflow: MLflowResource, torch_device: TorchDevice):
    """One evaluation asset: the production model's own test split (plots, running cost),
    then the walk-forward skill claim, stored in model_evaluations and the model's MLflow run."""
    data = load_dataset(storage)
    pointer, run_dir = load_current_model(storage, family)
    device = str(torch_device.choose().device)
    out_dir = run_dir / "evaluation"
    report = production_report(family, pointer, data, config, out_dir, device)
    # the skill claim: walk-forward, one fresh model per fold
    checkpoint = Path(pointer["checkpoint"])
    name = families.family(family).registered_name
    result = run_walk_forward(family, checkpoint, data, config, device, context.log.info,
                              production_settings(family, storage, mlflow,
                                                  pointer["mlflow_run_id"], checkpoint, device),
                              scored=lambda protocol: scored_baselines(storage, protocol),
                              cache_dir=storage.fold_model_cache)
    store_bars(storage, result, pointer["version"], f"{family}-{context.run.run_id}")
    said = report_warnings(context, fold_warnings(result.folds, data.meta["roots"]))  # holes in folds
    figures = {**report.plots, "walk_forward_equity": walk_forward_chart(family, result, out_dir)}
    running = {k: v for k, v in report.metrics.items()
               if k.startswith(("latency_", "throughput_", "peak_memory", "n_parameters",
                                "checkpoint_mb"))}
    rows = evaluation_rows(family, pointer["version"], "fp32", result, context.run.run_id,
                           datetime.now(UTC), extra=running,
                           equals=composition_equals(family, checkpoint))
    equals = result.candidates[name].equals or composition_equals(family, checkpoint)
    storage.append_rows(EVALUATIONS_TABLE, rows, f"{family}-{context.run.run_id}")
    pooled = {**result.candidates[name].pooled, **running}
    _log_to_run(TrackedRun(mlflow.client(), pointer["mlflow_run_id"], mlflow), report, pooled,
                result.protocol_id, figures)
    storage.store_run_outputs(pointer, run_dir, out_dir)
    return dg.MaterializeResult(metadata={
        **_evaluation_metadata(pointer, result, pooled, equals, report),
        "plots": dg.MetadataValue.md(pngs_md(figures)),
        "mlflow_run_id": pointer["mlflow_run_id"],
        **said,
    })


def _log_to_run(run: TrackedRun, report, pooled: dict, protocol_id: str,
                figures: dict[str, Path]) -> None:
    """test_*: the production model on its own test split; wf_*: walk-forward pooled."""
    run.log_metrics({f"test_{k}": f for k, v in report.metrics.items()
                     if (f := float_or_none(v)) is not None})
    run.log_metrics({f"wf_{k}": f for k, v in pooled.items() if (f := float_or_none(v)) is not None})
    run.set_tags({"protocol_id": protocol_id})
    for path in figures.values():
        run.log_artifact(Path(path), "evaluation")


def _evaluation_metadata(pointer: dict, result, pooled: dict, equals: str | None, report) -> dict:
    """The evaluation asset's headline metadata: the model, the folds and its pooled metrics."""
    return {
        "model": f"{pointer['registered_model']} v{pointer['version']}",
        "protocol_id": result.protocol_id,
        "folds": dg.MetadataValue.md(folds_markdown(result)),
        "test_period": f"{result.folds[0].describe()['test'].split(' .. ')[0]} .. "
                       f"{result.folds[-1].describe()['test'].split(' .. ')[-1]}",
        "sharpe": _meta_float(pooled.get("sharpe")),
        "sharpe_ci_low": _meta_float(pooled.get("sharpe_ci_low")),
        "ic": _meta_float(pooled.get("ic")),
        "ic_ci_low": _meta_float(pooled.get("ic_ci_low")),
        "equals": equals or "-",
        "n_trades": _meta_float(pooled.get("n_trades")),
        "hit_rate": _meta_float(pooled.get("hit_rate")),
        "q_risk_p50": _meta_float(pooled.get("q_risk_p50")),
        "latency_ms_p95": _meta_float(pooled.get("latency_ms_p95")),
        "walk_forward": dg.MetadataValue.md(walk_forward_markdown(result)),
        "production_model_test_split": dg.MetadataValue.md(report.markdown),
    }
