"""The champion_forecasts asset's drift checks: each trade date's features and forecasts
against the champion's reference dates, as WARN check verdicts."""

from collections.abc import Iterator
from datetime import date

import dagster as dg
import polars as pl

from assets.common import markdown_table
from assets.common.forecasting_configs import (
    FEATURE_DRIFT,
    FORECASTS,
    PREDICTION_DRIFT,
    ChampionForecastsConfig,
)
from assets.common.partition_checks import Verdict, verdict
from assets.common.partitions import partition_dates
from foxhunt_pipeline.forecasting.reference import date_drift
from foxhunt_pipeline.storage import trade_dates as stored
from models.monitoring import drift
from resources.champion import Champion
from resources.storage import FoxhuntStorage


def dates_of(storage: FoxhuntStorage, key: str) -> list[date]:
    """The stored features dates a partition holds (a Friday partition holds the weekend)."""
    lo, hi = partition_dates(key)
    return [d for d in stored.stored_dates(storage.warehouse_root, "features") if lo <= d <= hi] \
        or [lo]


def drift_checks(champ: Champion, storage: FoxhuntStorage, config: ChampionForecastsConfig,
                  day: date, rows: pl.DataFrame) -> tuple[drift.DriftReport, drift.DriftReport]:
    """The date's (feature, forecast) drift reports; empty before the champion went live."""
    th = config.thresholds()
    if champ.live_start is None:
        return drift.DriftReport(thresholds=th), drift.DriftReport(thresholds=th)
    return date_drift(storage.warehouse_root, champ.fm, champ.cost_by_root, champ.live_start,
                      day, rows, th, config.reference_days, config.reference_rows)


def drift_verdicts(key: str, reports: tuple[drift.DriftReport, drift.DriftReport] | None,
                       why_not: str) -> Iterator[Verdict]:
    """Both drift checks' verdicts on partition ``key`` (passed, saying ``why_not``, when
    there was nothing to compare)."""
    warn = dg.AssetCheckSeverity.WARN
    for check, i in ((FEATURE_DRIFT, 0), (PREDICTION_DRIFT, 1)):
        report = reports[i] if reports is not None else None
        if report is None or not report.features:
            yield verdict(FORECASTS, check, key, True, warn, why_not or "nothing to compare")
            continue
        top = pl.DataFrame([{"name": f.name, "score": f.score, "psi": f.psi, "ks": f.statistic,
                             "ks_p_value": f.p_value, "drifted": f.drifted} for f in report.top(10)])
        yield verdict(FORECASTS, check, key, not report.warn, warn, report.describe(),
                          drifted=dg.MetadataValue.int(len(report.drifted)),
                          top=dg.MetadataValue.md(markdown_table(top, 10)))
