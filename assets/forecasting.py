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

from datetime import UTC, datetime

import dagster as dg
import polars as pl

from assets.common import OWNERS, code_version_of, markdown_table
from assets.common.drift_checks import dates_of, drift_checks, drift_verdicts
from assets.common.forecasting_configs import (
    DECAY,
    FEATURE_DRIFT,
    FORECASTS,
    LIVE,
    PREDICTION_DRIFT,
    ChampionForecastsConfig,
    LivePerformanceConfig,
)
from assets.common.live_outputs import live_chart, record_alarm
from assets.common.partition_checks import Verdict, check_evaluations, check_output, verdict
from assets.common.partitions import trade_dates
from assets.features import features
from assets.leaderboard import model_leaderboard
from foxhunt_pipeline.forecasting.daily import forecast_date
from foxhunt_pipeline.forecasting.freshness import ForecastRefused, NoData
from foxhunt_pipeline.forecasting.live_day import decay_message, live_day
from foxhunt_pipeline.storage import object_store
from resources.champion import current_champion
from resources.mlflow_tracking import MLflowResource
from resources.storage import FoxhuntStorage


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
    evaluations: list[Verdict] = []
    refused: list[str] = []
    made = datetime.now(UTC)
    for key in context.partition_keys:
        meta: dict = {}
        reports, why_not = None, ""
        if champ is None:
            why_not = "no overall champion yet: nothing forecast"
            meta["champion"] = "none"
        for day in (dates_of(storage, key) if champ is not None else []):
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
            reports = drift_checks(champ, storage, config, day, done.rows)
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
        evaluations.extend(drift_verdicts(key, reports, why_not))
    object_store.refresh_duckdb_views(storage.duckdb_path, storage.warehouse_root)
    yield dg.MaterializeResult(metadata={"champion": champ.ref.key if champ else "none yet"})
    yield from check_evaluations(context, evaluations)
    yield check_output(FEATURE_DRIFT, FORECASTS)
    yield check_output(PREDICTION_DRIFT, FORECASTS)
    if refused:
        raise dg.Failure(description="; ".join(refused[:5]), allow_retries=False)


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
            evaluations.append(verdict(LIVE, DECAY, key, True, dg.AssetCheckSeverity.ERROR,
                                           "no overall champion yet"))
            continue
        ld = live_day(storage.warehouse_root, champ, dates_of(storage, key)[-1], config)
        message = decay_message(champ, ld, th)
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
                meta.update(live_chart(storage, mlflow, champ, ld))
                summary.update(meta)
        if alarm:
            record_alarm(mlflow, champ, ld, message)
            context.log.error(message)
        context.add_asset_metadata(meta, partition_key=key)
        evaluations.append(verdict(
            LIVE, DECAY, key, not alarm, dg.AssetCheckSeverity.ERROR, message,
            cusum=float(ld.result.last) if ld and ld.result else 0.0,
            threshold=float(ld.result.threshold) if ld and ld.result else float("nan"),
            false_alarm_rate=float(ld.false_alarm) if ld else float("nan")))
    yield dg.MaterializeResult(metadata=summary)
    yield from check_evaluations(context, evaluations)
    yield check_output(DECAY, LIVE)


