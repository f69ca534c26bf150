"""The quantization asset of a family (the quantization group's four and the ensemble's):
fp32 / int8 / fp16 / bf16 variants scored on the same test split, accepted ones exported
and registered as versions tagged with their precision."""


import json
from pathlib import Path

import dagster as dg
import polars as pl

from assets.common import EAGER_AFTER_CHECKS, OWNERS, code_version_of, markdown_table, registration
from assets.common.config_fields import sized
from assets.common.model_runs import load_current_model, load_dataset
from foxhunt_pipeline.storage import model_store
from models import families
from models.agents import forecast_memo
from models.agents.policy import load_policy
from models.quantization import DEFAULT_TOLERANCE, Tolerance
from models.quantization.report import quantize_agent, quantize_forecaster
from models.training.checkpoint import load_checkpoint
from models.windows import recent_rows
from resources.mlflow_tracking import MLflowResource, TrackedRun
from resources.storage import FoxhuntStorage


class QuantizationConfig(dg.Config):
    """A variant is accepted within ``max_rel_loss_increase`` of fp32's pinball loss
    (forecasters) or with at least ``min_action_agreement`` of fp32's actions (agents)."""

    precisions: list[str] = sized("quantization", "precisions", ["fp32", "int8", "fp16", "bf16"],
                                  "The variants made, scored and exported.")
    max_rel_loss_increase: float = 0.05
    min_action_agreement: float = 0.95
    max_windows: int = 1024
    report_rows: int = sized("evaluation", "report_rows", 0, "Agents: the most recent test-split "
                             "rows they are replayed on (the evaluation's production report "
                             "rows, whose state is already computed). 0: the whole split.")
    register_accepted: bool = True


def _quantize(family: str, context: dg.AssetExecutionContext, config: QuantizationConfig,
              storage: FoxhuntStorage, mlflow: MLflowResource) -> dg.MaterializeResult:
    data = load_dataset(storage)
    pointer, run_dir = load_current_model(storage, family)
    out_dir = run_dir / "quantized"
    tolerance = Tolerance(
        max_rel_loss_increase=config.max_rel_loss_increase, min_action_agreement=config.min_action_agreement,
        max_sharpe_drop=DEFAULT_TOLERANCE.max_sharpe_drop, max_slowdown=DEFAULT_TOLERANCE.max_slowdown,
        latency_budget_ms=DEFAULT_TOLERANCE.latency_budget_ms,
    )
    if families.family(family).kind == "forecaster":
        model, _ = load_checkpoint(pointer["checkpoint"])
        report = quantize_forecaster(model, data, model_name=family, out_dir=out_dir, tolerance=tolerance,
                                     precisions=config.precisions, max_windows=config.max_windows)
    else:  # its forecasters' state over those rows is the evaluation's, read from the cache
        policy = load_policy(pointer["checkpoint"])
        with forecast_memo.on_disk(storage.forecast_cache):
            report = quantize_agent(policy, recent_rows(data, {"test": config.report_rows or None}),
                                    model_name=family, out_dir=out_dir, tolerance=tolerance,
                                    precisions=config.precisions)
    report_path = report.to_json(out_dir / "quantization.json")
    versions = _register(family, pointer, report, mlflow, data, storage) if config.register_accepted else {}
    stored = storage.store_run_outputs(pointer, run_dir, out_dir)
    table = pl.DataFrame([{k: v for k, v in r.items() if isinstance(v, str | int | float | bool)} for r in report.rows])
    full_csv = out_dir / "quantization_variants.csv"
    table.write_csv(full_csv)
    if config.register_accepted:
        TrackedRun(mlflow.client(), pointer["mlflow_run_id"], mlflow).log_artifact(full_csv, "quantized")
    for precision, artifact in report.artifacts.items():
        context.log.info(f"{family} {precision}: artifact {artifact}")
    return dg.MaterializeResult(
        metadata={
            "recommended": report.recommended,
            "reason": report.reason,
            "variants": dg.MetadataValue.md(markdown_table(table.select([c for c in SUMMARY_COLUMNS if c in table.columns]))
                                            + f"\n\n_all {table.width} columns: `{full_csv.name}` (MLflow artifact "
                                            "`quantized/`, and beside the report)_"),
            "registered_versions": json.dumps(versions),
            "report": dg.MetadataValue.path(_at(stored, out_dir, report_path)),
            **{f"artifact_{p}": dg.MetadataValue.path(_at(stored, out_dir, a))
               for p, a in report.artifacts.items()},
        }
    )


# what a reader decides on; the other ~20 measurements stay in the CSV
SUMMARY_COLUMNS = ("precision", "accepted", "metric_rel_change", "action_agreement", "sharpe_delta",
                   "rel_output_diff", "size_ratio", "latency_ratio_b1", "reason")


def _at(stored: str, out_dir: Path, path) -> str:
    """``path`` under ``out_dir`` as it is named where ``out_dir`` was stored."""
    return model_store.located(stored, out_dir, Path(path))


def _register(family: str, pointer: dict, report, mlflow: MLflowResource, data, storage: FoxhuntStorage
              ) -> dict[str, str]:
    """Each accepted non-fp32 artifact becomes a model version (the same pyfunc wrapper as
    training's, tagged with its precision), logged to the training run so lineage stays in
    one place."""
    run = TrackedRun(mlflow.client(), pointer["mlflow_run_id"], mlflow)
    versions: dict[str, str] = {}
    rows = {r.get("precision"): r for r in report.rows}
    for precision, artifact in report.artifacts.items():
        run.log_artifacts(Path(artifact), f"quantized/{precision}")
        if precision == "fp32":
            continue
        metrics = {k: v for k, v in rows.get(precision, {}).items()
                   if k in ("rel_output_diff", "metric_rel_change", "action_agreement", "sharpe_delta",
                            "size_ratio", "latency_ratio_b1") and isinstance(v, int | float)}
        versions[precision] = registration.register(
            run, family, pointer["registered_model"], Path(artifact), data, storage, metrics=metrics,
            precision=precision, artifact_path=f"model_{precision}",
            tags={"recommended": str(precision == report.recommended)})
    return versions


def quantized_asset(family: str):
    @dg.asset(
        name=f"{family}_quantized",
        deps=[f"{family}_evaluation"],
        group_name="quantization",
        kinds={"pytorch", "mlflow"},
        owners=OWNERS,
        code_version=code_version_of("models.quantization", "models.quantization.report", "models.export"),
        automation_condition=EAGER_AFTER_CHECKS,
        description=f"int8 / fp16 / bf16 variants of the {family} model against fp32 on the test "
        "split: accuracy delta, latency, size; deployable artifacts for accepted variants and a "
        "recommendation.",
    )
    def _asset(context: dg.AssetExecutionContext, config: QuantizationConfig, storage: FoxhuntStorage,
               mlflow: MLflowResource) -> dg.MaterializeResult:
        return _quantize(family, context, config, storage, mlflow)

    return _asset
