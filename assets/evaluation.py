"""Evaluation assets: every model on the same held-out period, costs and baselines; results
in DuckDB ``model_evaluations``, the model's MLflow run and the asset's metadata."""

import base64
import json
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import polars as pl

from assets.common import EAGER_AFTER_CHECKS, OWNERS, code_version_of
from assets.training import load_current_model, load_dataset
from foxhunt_pipeline.config import profiles
from resources.mlflow_tracking import MLflowResource, TrackedRun
from resources.storage import FoxhuntStorage
from resources.torch_device import TorchDevice

EVALUATIONS_TABLE = "model_evaluations"
FORECASTERS = ("tft", "mamba2", "ensemble")  # quantile models; the others are trading agents
SUMMARY_METRICS = (
    "sharpe", "sharpe_ci_low", "sharpe_ci_high", "annual_log_return", "max_drawdown", "win_rate_trades",
    "n_trades", "exposure", "turnover_per_year", "directional_accuracy", "directional_accuracy_ci_low",
    "directional_accuracy_ci_high", "q_risk_p50", "q_risk_p90", "coverage_80", "pinball_mean",
    "latency_ms_p50", "latency_ms_p95", "latency_ms_p99", "throughput_b32_per_s", "throughput_b256_per_s",
    "peak_memory_mb", "n_parameters", "checkpoint_mb",
)


class EvaluationConfig(dg.Config):
    cost_multiplier: float = 1.0
    threshold_k: float = 1.0
    latency_calls: int = profiles.default("evaluation", "latency_calls", 200)
    bootstrap: int = profiles.default("evaluation", "bootstrap", 1000)
    seed: int = 0


def evaluation_rows(family: str, version: str, precision: str, report, context_run_id: str,
                    evaluated_at: datetime) -> pl.DataFrame:
    """One row for the model and one per baseline, long-lived columns plus the full JSON."""
    rows = []
    for model, fam, metrics in [(f"foxhunt-{family}", family, report.metrics)] + [
        (f"baseline:{b}", "baseline", m) for b, m in report.baselines.items()
    ]:
        row = {
            "model": model, "family": fam, "evaluated_for": family,
            "version": version if fam != "baseline" else "", "precision": precision,
            "evaluated_at": evaluated_at, "dagster_run_id": context_run_id,
            "test_start": report.period.get("test_start", ""), "test_end": report.period.get("test_end", ""),
        }
        row.update({k: _float_or_none(metrics.get(k)) for k in SUMMARY_METRICS})
        row["metrics_json"] = json.dumps({k: _float_or_none(v) for k, v in metrics.items()})
        rows.append(row)
    schema = {k: pl.Float64 for k in SUMMARY_METRICS}
    return pl.DataFrame(rows, schema_overrides=schema | {"evaluated_at": pl.Datetime("us", "UTC")})


def _float_or_none(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f and abs(f) != float("inf") else None


def _png_markdown(plots: dict[str, Path]) -> str:
    parts = []
    for name, path in plots.items():
        data = base64.b64encode(Path(path).read_bytes()).decode()
        parts.append(f"**{name}**\n\n![{name}](data:image/png;base64,{data})")
    return "\n\n".join(parts)


def _evaluate(family: str, context: dg.AssetExecutionContext, config: EvaluationConfig,
              storage: FoxhuntStorage, mlflow: MLflowResource, torch_device: TorchDevice):

    data = load_dataset(storage)
    pointer, run_dir = load_current_model(storage, family)
    device = str(torch_device.choose().device)
    out_dir = run_dir / "evaluation"
    kwargs = dict(out_dir=out_dir, device=device, cost_multiplier=config.cost_multiplier,
                  latency_calls=config.latency_calls, bootstrap=config.bootstrap, seed=config.seed)
    if family in FORECASTERS:
        report = _evaluate_forecaster(family, pointer, data, config, kwargs)
    else:
        report = _evaluate_agent(family, pointer, data, kwargs)
    now = datetime.now(UTC)
    rows = evaluation_rows(family, pointer["version"], "fp32", report, context.run.run_id, now)
    storage.append_rows(EVALUATIONS_TABLE, rows, f"{family}-{context.run.run_id}")
    run = TrackedRun(mlflow.client(), pointer["mlflow_run_id"], mlflow)
    run.log_metrics({f"test_{k}": f for k, v in report.metrics.items() if (f := _float_or_none(v)) is not None})
    for path in report.plots.values():
        run.log_artifact(Path(path), "evaluation")
    storage.store_run_outputs(pointer, run_dir, out_dir)
    m = report.metrics
    return dg.MaterializeResult(
        metadata={
            "model": f"{pointer['registered_model']} v{pointer['version']}",
            "test_period": f"{report.period.get('test_start')} .. {report.period.get('test_end')}",
            "sharpe": _float_or_none(m.get("sharpe")) or 0.0,
            "directional_accuracy": _float_or_none(m.get("directional_accuracy")) or 0.0,
            "q_risk_p50": _float_or_none(m.get("q_risk_p50")) or 0.0,
            "latency_ms_p95": _float_or_none(m.get("latency_ms_p95")) or 0.0,
            "comparison": dg.MetadataValue.md(report.markdown),
            "plots": dg.MetadataValue.md(_png_markdown(report.plots)),
            "mlflow_run_id": pointer["mlflow_run_id"],
        }
    )


def _evaluate_forecaster(family: str, pointer: dict, data, config: EvaluationConfig, kwargs: dict):
    from models.evaluation.evaluate import evaluate_forecaster
    from models.training.checkpoint import load_checkpoint

    model, meta = load_checkpoint(pointer["checkpoint"], device=kwargs["device"])
    extra = meta.get("extra", meta)
    features = {k: extra.get(f"{k}_names", []) for k in ("observed", "known", "static")}
    return evaluate_forecaster(
        family, model, data, threshold_k=config.threshold_k, model_features=features,
        checkpoint_path=Path(pointer["checkpoint"]), **kwargs,
    )


def _evaluate_agent(family: str, pointer: dict, data, kwargs: dict):
    """The policy acts sequentially (its observation holds its own position), so positions come
    from the environment's batched replay; the evaluation then scores them like any model's."""
    import numpy as np
    import torch

    from models.agents.policy import load_policy
    from models.agents.trading_env import evaluate_positions
    from models.evaluation.evaluate import evaluate_agent

    policy = load_policy(pointer["checkpoint"], device=kwargs["device"])
    replay = evaluate_positions(policy, data, "test")
    positions = np.zeros(data.splits["test"].n_rows, dtype=np.float64)
    positions[np.asarray(replay["rows"], dtype=np.int64)] = replay["positions"]
    sample = torch.zeros(1, policy.obs_dim)

    def act(*_inputs):
        return policy(sample.expand(_inputs[0].shape[0], -1).to(kwargs["device"]))

    return evaluate_agent(family, positions, data, model=policy, act_fn=act,
                          checkpoint_path=Path(pointer["checkpoint"]) / "policy.safetensors", **kwargs)


def _evaluation_asset(family: str, upstream: str):
    @dg.asset(
        name=f"{family}_evaluation",
        deps=[upstream],
        group_name="evaluation",
        kinds={"pytorch", "duckdb", "mlflow"},
        owners=OWNERS,
        code_version=code_version_of("models.evaluation.evaluate", "models.evaluation.backtest", "models.evaluation.metrics"),
        automation_condition=EAGER_AFTER_CHECKS,
        description=f"Out-of-sample evaluation of {upstream} on the test split: forecast and "
        "trading metrics with costs and next-bar fills, bootstrap CIs, running cost, next to the "
        "flat / buy-and-hold / momentum (and climatology) baselines.",
    )
    def _asset(context: dg.AssetExecutionContext, config: EvaluationConfig, storage: FoxhuntStorage,
               mlflow: MLflowResource, torch_device: TorchDevice) -> dg.MaterializeResult:
        return _evaluate(family, context, config, storage, mlflow, torch_device)

    return _asset


tft_evaluation = _evaluation_asset("tft", "tft_model")
mamba2_evaluation = _evaluation_asset("mamba2", "mamba2_model")
dqn_evaluation = _evaluation_asset("dqn", "dqn_agent")
ppo_evaluation = _evaluation_asset("ppo", "ppo_agent")
