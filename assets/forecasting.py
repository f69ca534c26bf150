"""Forecasting assets (group ``forecasting``), both partitioned by trade date:

* ``champion_forecasts``: the overall champion's forecasts of every decision bar of every
  root of the date, stored per date and model version (DuckDB views ``forecasts``,
  ``realised``), with two WARN checks per date: feature drift against the champion's
  training dates and drift of its forecasts.
* ``live_performance``: the champion's live Sharpe, IC and pinball since it went live
  beside the band its walk-forward predicts for that many days, a live-versus-backtest
  plot, and the ERROR check ``live_pnl_decay`` (a CUSUM of live P&L against the backtest)
  whose failure records an alarm on the model version, asks for retraining through
  declarative automation (``RETRAIN_ON_DECAY`` on ``training_dataset``) and has the
  leaderboard demote the champion if the retrained models do not replace it.

Thin: the work is in ``foxhunt_pipeline.forecasting`` and ``models.monitoring``.
"""


import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime

import dagster as dg
import numpy as np
import polars as pl

# not exported at the top level, but the type of AssetCheckEvaluation.target_materialization_data
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)
from pydantic import Field

from assets.common import OWNERS, code_version_of, markdown_table
from assets.common.config_fields import library_default
from assets.common.evaluation_config import EvaluationConfig
from assets.common.metadata_images import image_md
from assets.common.partitions import partition_dates, trade_dates
from assets.features import features
from assets.leaderboard import model_leaderboard
from foxhunt_pipeline.forecasting.daily import forecast_date
from foxhunt_pipeline.forecasting.freshness import ForecastRefused, NoData
from foxhunt_pipeline.forecasting.reference import date_drift, decay_threshold, test_pnl
from foxhunt_pipeline.storage import forecast_views as views
from foxhunt_pipeline.storage import object_store
from foxhunt_pipeline.storage import trade_dates as stored
from models.monitoring import band as bands
from models.monitoring import decay, drift, live
from resources.champion import DECAY_TAG, Champion, current_champion
from resources.mlflow_tracking import MLflowResource
from resources.storage import FoxhuntStorage

FORECASTS = "champion_forecasts"
LIVE = "live_performance"
FEATURE_DRIFT = "forecasts_feature_drift"
PREDICTION_DRIFT = "forecasts_prediction_drift"
DECAY = "live_pnl_decay"


class ChampionForecastsConfig(dg.Config):
    """The trading rule of the forecasts and the drift checks' reference and thresholds."""

    threshold_k: float = Field(EvaluationConfig().threshold_k, description="Enter beyond this "
                               "many one-way costs (the evaluation's no-trade band).")
    reference_days: int = Field(20, description="Stored dates before the live start that the "
                                "drift checks compare each date with: a date warns when a "
                                "feature moved further than on any of them (leave one date "
                                "out), at most 1 / (days + 1) of the time by chance.")
    reference_rows: int = Field(20_000, description="Feature rows sampled from them.")
    psi_floor: float = Field(library_default(drift.DriftThresholds, "psi"),
                             description="A drifted feature's PSI must also pass this.")

    def thresholds(self) -> drift.DriftThresholds:
        return drift.DriftThresholds(psi=self.psi_floor)


class LivePerformanceConfig(dg.Config):
    """The decay detector's thresholds (``models.monitoring.decay``) and the band's bootstrap."""

    decay_false_alarm: float = Field(library_default(decay.DecayThresholds, "false_alarm"),
                                     description="Chance that live_pnl_decay fails over "
                                     "decay_horizon_days when nothing decayed: sets the CUSUM "
                                     "level from the champion's own test bars.")
    decay_horizon_days: int = Field(library_default(decay.DecayThresholds, "horizon_days"),
                                    description="Live trade dates that false-alarm rate is "
                                    "counted over.")
    decay_k_fraction: float = Field(library_default(decay.DecayThresholds, "k_fraction"),
                                    description="The CUSUM's allowance as a share of the "
                                    "backtest's edge per bar.")
    decay_min_bars: int = Field(library_default(decay.DecayThresholds, "min_bars"),
                                description="Live bars before the check may fail.")
    decay_threshold: float = Field(0.0, description="A fixed CUSUM level (bar P&L sd units) "
                                   "instead of the calibrated one; 0: calibrated.")
    resamples: int = Field(400, description="Block-bootstrap paths of the band, the "
                           "calibration and the false-alarm rate.")
    seed: int = 0

    def thresholds(self) -> decay.DecayThresholds:
        return decay.DecayThresholds(self.decay_k_fraction, self.decay_false_alarm,
                                     self.decay_horizon_days, self.decay_min_bars,
                                     self.decay_threshold or None)


def _dates_of(storage: FoxhuntStorage, key: str) -> list[date]:
    """The stored features dates a partition holds (a Friday partition holds the weekend)."""
    lo, hi = partition_dates(key)
    return [d for d in stored.stored_dates(storage.warehouse_root, "features") if lo <= d <= hi] \
        or [lo]


def _check_output(check: str, asset: str) -> dg.Output:
    """The (empty) output a declared check has: its evaluations are yielded per partition."""
    return dg.Output(None, output_name=f"{asset}_{check}")


@dataclass(frozen=True)
class _Verdict:
    """A check's verdict on one partition, yielded once the partition is materialized."""

    asset: str
    check: str
    key: str
    passed: bool
    severity: dg.AssetCheckSeverity
    message: str
    metadata: dict


def _evaluation(asset: str, check: str, key: str, passed: bool, severity, message: str,
                **metadata) -> _Verdict:
    return _Verdict(asset, check, key, passed, severity, message, metadata)


def _evaluations(context: dg.AssetExecutionContext,
                 verdicts: list[_Verdict]) -> Iterator[dg.AssetCheckEvaluation]:
    """The verdicts as partitioned check evaluations, each against its partition's new
    materialization (what ``AutomationCondition.check_failed`` reads), one per partition of a
    range run."""
    for v in verdicts:
        records = context.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(v.asset), asset_partitions=[v.key]),
            limit=1).records
        target = None if not records else AssetCheckEvaluationTargetMaterializationData(
            run_id=records[0].event_log_entry.run_id, storage_id=records[0].storage_id,
            timestamp=records[0].timestamp)
        yield dg.AssetCheckEvaluation(asset_key=dg.AssetKey(v.asset), check_name=v.check,
                                      passed=v.passed, severity=v.severity, partition=v.key,
                                      target_materialization_data=target,
                                      metadata={"message": v.message, **v.metadata})


def _drift_checks(champ: Champion, storage: FoxhuntStorage, config: ChampionForecastsConfig,
                  day: date, rows: pl.DataFrame) -> tuple[drift.DriftReport, drift.DriftReport]:
    th = config.thresholds()
    if champ.live_start is None:
        return drift.DriftReport(thresholds=th), drift.DriftReport(thresholds=th)
    return date_drift(storage.warehouse_root, champ.fm, champ.cost_by_root, champ.live_start,
                      day, rows, th, config.reference_days, config.reference_rows)


def _drift_evaluations(key: str, reports: tuple[drift.DriftReport, drift.DriftReport] | None,
                       why_not: str) -> Iterator[dg.AssetCheckEvaluation]:
    warn = dg.AssetCheckSeverity.WARN
    for check, i in ((FEATURE_DRIFT, 0), (PREDICTION_DRIFT, 1)):
        report = reports[i] if reports is not None else None
        if report is None or not report.features:
            yield _evaluation(FORECASTS, check, key, True, warn, why_not or "nothing to compare")
            continue
        top = pl.DataFrame([{"name": f.name, "score": f.score, "psi": f.psi, "ks": f.statistic,
                             "ks_p_value": f.p_value, "drifted": f.drifted} for f in report.top(10)])
        yield _evaluation(FORECASTS, check, key, not report.warn, warn, report.describe(),
                          drifted=dg.MetadataValue.int(len(report.drifted)),
                          top=dg.MetadataValue.md(markdown_table(top, 10)))


@dg.asset(
    partitions_def=trade_dates,
    backfill_policy=dg.BackfillPolicy.single_run(),
    deps=[dg.AssetDep(features, partition_mapping=dg.TimeWindowPartitionMapping(
        start_offset=-1, end_offset=0, allow_nonexistent_upstream_partitions=True)),
        model_leaderboard],
    group_name="forecasting",
    kinds={"pytorch", "parquet", "duckdb"},
    owners=OWNERS,
    code_version=code_version_of("foxhunt_pipeline.forecasting.daily",
                                 "foxhunt_pipeline.forecasting.reference",
                                 "foxhunt_pipeline.storage.forecast_views",
                                 "models.monitoring.drift"),
    check_specs=[
        dg.AssetCheckSpec(FEATURE_DRIFT, asset=FORECASTS, partitions_def=trade_dates,
                          description="WARN when a feature of the date drifted from the "
                          "champion's reference dates further (PSI and KS distance) than any "
                          "reference date did from the others; names the most drifted"),
        dg.AssetCheckSpec(PREDICTION_DRIFT, asset=FORECASTS, partitions_def=trade_dates,
                          description="WARN when the champion's forecasts (an agent's "
                          "positions) of the date drifted from its forecasts of the "
                          "reference dates"),
    ],
    description="The overall champion (loaded by its alias, name and version on every row) "
    "forecasts every decision bar of every root of the trade date from the date's features "
    "and the lookback before it: quantiles per horizon and the no-trade band's position "
    "(a forecaster), or action and position (an agent). Parquet per date and model version; "
    "DuckDB views `forecasts` (the version first to forecast each date) and `realised` "
    "(joined to the outcomes as they arrive). A date whose features are missing, held back "
    "or stale is refused, naming it.",
)
def champion_forecasts(context: dg.AssetExecutionContext, config: ChampionForecastsConfig,
                       storage: FoxhuntStorage, mlflow: MLflowResource):
    champ = current_champion(storage, mlflow, config.threshold_k)
    evaluations: list[_Verdict] = []
    refused: list[str] = []
    made = datetime.now(UTC)
    for key in context.partition_keys:
        meta: dict = {}
        reports, why_not = None, ""
        if champ is None:
            why_not = "no overall champion yet: nothing forecast"
            meta["champion"] = "none"
        for day in (_dates_of(storage, key) if champ is not None else []):
            try:
                done = forecast_date(storage.warehouse_root, day, champ.fm, champ.cost_by_root,
                                     made)
            except NoData as e:  # a holiday, a weekend: nothing landed, nothing to forecast
                why_not = str(e)
                continue
            except ForecastRefused as e:
                refused.append(str(e))
                context.log.error(str(e))
                why_not = str(e)
                continue
            reports = _drift_checks(champ, storage, config, day, done.rows)
            meta.update({
                "champion": champ.ref.key, "trade_date": str(day),
                "rows": dg.MetadataValue.int(done.rows.height),
                "rows_per_root": dg.MetadataValue.json(done.per_root()),
                "replaced_own_rows": done.replaced,
                "warmup_dates": ", ".join(map(str, done.warmup_dates)) or "-",
                "live_start": str(champ.live_start or "-"),
                "path": dg.MetadataValue.path(str(done.path)),
            })
        context.add_asset_metadata(meta or {"champion": champ.ref.key if champ else "none"},
                                   partition_key=key)
        evaluations.extend(_drift_evaluations(key, reports, why_not))
    object_store.refresh_duckdb_views(storage.duckdb_path, storage.warehouse_root)
    yield dg.MaterializeResult(metadata={"champion": champ.ref.key if champ else "none yet"})
    yield from _evaluations(context, evaluations)
    yield _check_output(FEATURE_DRIFT, FORECASTS)
    yield _check_output(PREDICTION_DRIFT, FORECASTS)
    if refused:
        raise dg.Failure(description="; ".join(refused[:5]), allow_retries=False)


# --- live performance ------------------------------------------------------------------


@dataclass(frozen=True)
class LiveDay:
    """What the champion did live up to one trade date."""

    day: date
    rows: list[dict]  # cumulative metrics per day and scope
    band: bands.Band | None
    result: decay.DecayResult | None
    false_alarm: float
    equity: list[float]
    sharpe: list[float]


def _live_bars(storage: FoxhuntStorage, champ: Champion, day: date) -> live.LiveBars | None:
    """The champion version's realised live rows from its live start to ``day``."""
    root = storage.warehouse_root
    if champ.live_start is None or day < champ.live_start:
        return None
    glob = {t: str(root / t / "trade_date=*" / "*.parquet") for t in (views.TABLE, "features")}
    frame = views.realised_frame(glob[views.TABLE], glob["features"], champ.live_start, day,
                                 filesystem=None if object_store.is_local(root) else root.fs)
    if frame.is_empty():
        return None
    frame = frame.filter((pl.col("model") == champ.ref.model)
                         & (pl.col("version") == champ.ref.version)).sort("ts_event")
    if frame.is_empty():
        return None

    def col(name: str) -> np.ndarray:
        return frame[name].cast(pl.Float64).fill_null(np.nan).to_numpy()

    return live.LiveBars(frame["trade_date"].cast(pl.String).to_numpy(),
                         frame["root"].to_numpy(), col("pnl"), col("forecast"),
                         col("realised_return"), col("pinball"))


def live_day(storage: FoxhuntStorage, champ: Champion, day: date,
             config: LivePerformanceConfig) -> LiveDay | None:
    bars = _live_bars(storage, champ, day)
    if bars is None:
        return None
    rows = live.cumulative_by_day(bars, champ.bars_per_year)
    days, counts = live.live_bar_counts(bars)
    test = test_pnl(champ.test_bars)
    band = (bands.rolling_band(test, counts, days, champ.bars_per_year,
                               resamples=config.resamples, seed=config.seed) if test else None)
    result, far = None, float("nan")
    if test:
        refs = decay.references(test)
        th = config.thresholds()
        h = decay_threshold(storage.warehouse_root, champ.ref.model, champ.ref.version,
                            champ.test_bars, th, config.resamples, config.seed)
        result = decay.detect(bars.pnl, bars.root, refs, h, th)
        used = np.isfinite(bars.pnl)
        steps = decay.in_control_steps(test, bars.root[used], refs, th.k_fraction,
                                       config.resamples, np.random.default_rng(config.seed))
        far = decay.false_alarm_rate(steps, h)
    pooled = [r for r in rows if r["scope"] == live.POOLED]
    return LiveDay(day, rows, band, result, far, [r["total_log_return"] for r in pooled],
                   [r["sharpe"] for r in pooled])


def _decay_message(champ: Champion, ld: LiveDay | None, th: decay.DecayThresholds) -> str:
    """One line: the verdict, the CUSUM against its level and that level's false-alarm rate."""
    if ld is None or ld.result is None:
        return (f"{champ.ref.key}: no live bars yet (live from {champ.live_start or '-'})"
                if champ.test_bars.height else
                f"{champ.ref.key}: no walk-forward test bars stored to compare with")
    r = ld.result
    verdict = (f"DECAY: live P&L fell below the backtest; CUSUM {r.peak:.1f} passed "
               f"{r.threshold:.1f} after {r.first_alarm + 1} of {r.bars} live bars"
               if r.alarm else f"no decay: CUSUM {r.last:.1f} (peak {r.peak:.1f}) < "
               f"{r.threshold:.1f} over {r.bars} live bars")
    return (f"{champ.ref.key} since {champ.live_start}: {verdict} (level set for a "
            f"{th.false_alarm:.0%} false-alarm rate over {th.horizon_days} live days; over as "
            f"many bars as so far: {ld.false_alarm:.1%})")


def _record_alarm(mlflow: MLflowResource, champ: Champion, ld: LiveDay, message: str) -> None:
    """The alarm on the model version (once): what the leaderboard's demotion reads."""
    if champ.ref.decay_alarm is not None:
        return
    body = {"trade_date": str(ld.day), "raised_at": datetime.now(UTC).isoformat(),
            "statistic": ld.result.peak if ld.result else None, "message": message}
    mlflow.client().set_model_version_tag(champ.ref.model, champ.ref.version, DECAY_TAG,
                                          json.dumps(body))


def _plot(storage: FoxhuntStorage, mlflow: MLflowResource, champ: Champion,
          ld: LiveDay) -> dict:
    """The live-versus-backtest chart inline, and in the champion's MLflow run."""
    from models.monitoring.plots import live_vs_backtest  # lazy: matplotlib

    if ld.band is None:
        return {}
    path = storage.run_scratch / "live" / f"live_vs_backtest_{ld.day}.png"
    live_vs_backtest(path, ld.band, ld.equity, ld.sharpe,
                     f"{champ.ref.key} live since {champ.live_start} vs its walk-forward "
                     f"(net of costs, all roots)")
    client = mlflow.client()
    client.log_artifact(champ.ref.run_id, str(path), "live")
    last = {r["scope"]: r for r in ld.rows if r["trade_date"] == str(ld.day)}
    for scope, r in last.items():
        for k in ("sharpe", "ic", "pinball"):
            if np.isfinite(r[k]):
                client.log_metric(champ.ref.run_id, f"live_{k}_{scope}", float(r[k]))
    return {"live_vs_backtest": image_md(path, "live vs backtest")}


@dg.asset(
    partitions_def=trade_dates,
    backfill_policy=dg.BackfillPolicy.single_run(),
    deps=[champion_forecasts],
    group_name="forecasting",
    kinds={"duckdb", "mlflow"},
    owners=OWNERS,
    code_version=code_version_of("models.monitoring.live", "models.monitoring.band",
                                 "models.monitoring.decay", "foxhunt_pipeline.storage.forecast_views"),
    check_specs=[dg.AssetCheckSpec(
        DECAY, asset=LIVE, partitions_def=trade_dates,
        description="ERROR when the champion's live P&L since its live start falls below its "
        "walk-forward test bars (one-sided CUSUM past the threshold): the alarm is recorded on "
        "the model version, retraining starts (declarative automation), and the leaderboard "
        "demotes the champion if the retrained models do not replace it")],
    description="The champion's live Sharpe, IC and pinball per root since it went live (the "
    "first trade date after its walk-forward test folds), beside the 5th-95th percentile band "
    "its walk-forward predicts for that many days (block bootstrap of its test bars), with "
    "the live-versus-backtest equity plot (also in its MLflow run).",
)
def live_performance(context: dg.AssetExecutionContext, config: LivePerformanceConfig,
                     storage: FoxhuntStorage, mlflow: MLflowResource):
    champ = current_champion(storage, mlflow)
    th = config.thresholds()
    evaluations = []
    summary: dict = {"champion": champ.ref.key if champ else "none yet"}
    for key in context.partition_keys:
        if champ is None:
            evaluations.append(_evaluation(LIVE, DECAY, key, True, dg.AssetCheckSeverity.ERROR,
                                           "no overall champion yet"))
            continue
        ld = live_day(storage, champ, _dates_of(storage, key)[-1], config)
        message = _decay_message(champ, ld, th)
        alarm = bool(ld and ld.result and ld.result.alarm)
        meta = {"champion": champ.ref.key, "live_start": str(champ.live_start or "-"),
                "decay": message}
        if ld is not None:
            table = pl.DataFrame([r for r in ld.rows if r["trade_date"] == str(ld.day)])
            meta["live"] = dg.MetadataValue.md(markdown_table(table, 20))
            if ld.band is not None:
                meta["band_sharpe_5_50_95"] = dg.MetadataValue.json(
                    [round(float(v), 3) for v in ld.band.sharpe[-1]])
            if key == context.partition_keys[-1]:
                meta.update(_plot(storage, mlflow, champ, ld))
                summary.update(meta)
        if alarm:
            _record_alarm(mlflow, champ, ld, message)
            context.log.error(message)
        context.add_asset_metadata(meta, partition_key=key)
        evaluations.append(_evaluation(
            LIVE, DECAY, key, not alarm, dg.AssetCheckSeverity.ERROR, message,
            cusum=float(ld.result.last) if ld and ld.result else 0.0,
            threshold=float(ld.result.threshold) if ld and ld.result else float("nan"),
            false_alarm_rate=float(ld.false_alarm) if ld else float("nan")))
    yield dg.MaterializeResult(metadata=summary)
    yield from _evaluations(context, evaluations)
    yield _check_output(DECAY, LIVE)


