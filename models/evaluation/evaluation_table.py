"""The ``model_evaluations`` rows and the pooled test bars of a walk-forward result: one row
per fold plus a pooled row per candidate, undefined metrics NULL (never 0)."""

from __future__ import annotations

import json
from datetime import datetime

import numpy as np
import polars as pl

from foxhunt_pipeline.basics.utc import iso_utc

#: Float columns of model_evaluations (NULL where undefined); the full set is in metrics_json.
SUMMARY_METRICS = (
    "n_bars", "sharpe", "sharpe_ci_low", "sharpe_ci_high", "ci_level", "annual_log_return",
    "max_drawdown", "n_trades", "turnover", "turnover_per_year", "hit_rate", "exposure", "ic",
    "rank_ic", "icir", "ic_ci_low", "ic_ci_high", "win_rate_trades", "directional_accuracy",
    "directional_accuracy_ci_low", "directional_accuracy_ci_high", "q_risk_p50", "q_risk_p90",
    "coverage_80", "pinball_mean", "latency_ms_p50", "latency_ms_p95", "latency_ms_p99",
    "throughput_b32_per_s", "throughput_b256_per_s", "peak_memory_mb", "n_parameters",
    "checkpoint_mb",
)


#: String columns, in table order after the identity columns. ``equals``: the baseline a model
#: repeats on every test bar (pooled row; "baseline:climatology" for an ensemble whose weights
#: are all on the climatology), NULL when it is a model of its own.
TEXT_COLUMNS = ("protocol_id", "fold", "test_start", "test_end", "sharpe_by_root", "equals")


def evaluation_rows(family: str, version: str, precision: str, result, context_run_id: str,
                    evaluated_at: datetime, extra: dict | None = None,
                    equals: str | None = None) -> pl.DataFrame:
    """Per candidate of a ``WalkForwardResult``: one row per fold and a ``pooled`` row, all
    with the protocol id; ``extra`` (running cost) goes to the model's pooled row, and
    ``equals`` (what the model is by construction, e.g. an ensemble weighted all on the
    climatology) unless the walk-forward found it repeats a baseline. Undefined metrics are
    NULL."""
    rows = []
    for name, cand in result.candidates.items():
        baseline = name.startswith("baseline:")
        ident = {"model": name, "family": "baseline" if baseline else family,
                 "evaluated_for": family, "version": "" if baseline else version,
                 "precision": precision, "evaluated_at": evaluated_at,
                 "dagster_run_id": context_run_id, "protocol_id": result.protocol_id}
        parts = [(str(f.fold.number), f.metrics, f.test_start_ns, f.test_end_ns) for f in cand.folds]
        parts.append(("pooled", {**cand.pooled, **({} if baseline else extra or {})},
                      min(f.test_start_ns for f in cand.folds), max(f.test_end_ns for f in cand.folds)))
        for fold, metrics, lo, hi in parts:
            roots = {k.removeprefix("sharpe_"): float_or_none(v) for k, v in metrics.items()
                     if k.startswith("sharpe_") and k.removeprefix("sharpe_").isupper()}
            same = None if baseline or fold != "pooled" else (cand.equals or equals)
            row = {**ident, "fold": fold, "test_start": iso_utc(lo), "test_end": iso_utc(hi),
                   "sharpe_by_root": json.dumps(roots, sort_keys=True), "equals": same}
            row.update({k: float_or_none(metrics.get(k)) for k in SUMMARY_METRICS})
            row["metrics_json"] = json.dumps({k: float_or_none(v) for k, v in metrics.items()})
            rows.append(row)
    schema = {k: pl.Float64 for k in SUMMARY_METRICS} | {k: pl.String for k in TEXT_COLUMNS}
    return pl.DataFrame(rows, schema_overrides=schema | {"evaluated_at": pl.Datetime("us", "UTC")})


def float_or_none(v) -> float | None:
    """``v`` as a float, ``None`` when it is missing, not a number or infinite."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f and abs(f) != float("inf") else None


def bars_frame(result, version: str) -> pl.DataFrame:
    """Every candidate's pooled walk-forward test bars: the family's named with ``version``
    (``models.evaluation.promotion.candidate_key``), the baselines by name."""
    frames = []
    for name, cand in result.candidates.items():
        b = cand.bars
        frames.append(pl.DataFrame({
            "model": name, "version": "" if name.startswith("baseline:") else str(version),
            "root": np.asarray(b.root, str), "ts_event": np.asarray(b.ts, np.int64),
            "position": np.asarray(b.positions, np.float64),
            "pnl": np.asarray(b.pnl, np.float64)}))
    return pl.concat(frames).with_columns(
        pl.col("ts_event").cast(pl.Datetime("ns", "UTC")),
        pl.lit(result.protocol_id).alias("protocol_id"),
        pl.lit(float(result.protocol["bars_per_year"])).alias("bars_per_year"))
