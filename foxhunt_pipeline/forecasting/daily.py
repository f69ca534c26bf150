"""Forecast one trade date and store it: what ``champion_forecasts`` materializes per
partition and ``foxhunt forecast`` runs per date."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime

import polars as pl
from upath import UPath

from foxhunt_pipeline.forecasting.frame import ForecastModel, forecast_rows
from foxhunt_pipeline.forecasting.freshness import refuse_unless_fresh
from foxhunt_pipeline.forecasting.inputs import read_date_inputs
from foxhunt_pipeline.forecasting.store import held_positions, write_forecasts
from foxhunt_pipeline.instruments.sessions import missing_sessions


@dataclass(frozen=True)
class DateForecast:
    day: date
    rows: pl.DataFrame
    path: UPath
    replaced: bool  # the version had forecast this date before (its rows were replaced)
    warmup_dates: tuple[date, ...]

    def per_root(self) -> dict[str, int]:
        return dict(self.rows.group_by("root").len().sort("root").iter_rows())


def forecast_date(root: UPath, day: date, fm: ForecastModel, cost_by_root: Mapping[str, float],
                  made_at: datetime | None = None) -> DateForecast:
    """Refuse a date whose features are missing, held back or stale (``ForecastRefused``,
    naming the date); else forecast its decision bars with ``fm`` from its features and the
    lookback's worth of the dates before, and store them under ``fm``'s version."""
    refuse_unless_fresh(root, day)
    inputs = read_date_inputs(root, day, int(fm.loaded.meta.get("lookback", 1)), fm.columns)
    before, held = held_positions(root, day)
    held = {r: v for r, v in held.items()
            if before is not None and missing_sessions(r, before, day) == 0}
    rows = forecast_rows(fm, inputs, cost_by_root, made_at or datetime.now(UTC), held)
    if rows.is_empty():
        path, replaced = UPath(""), False
    else:
        path, replaced = write_forecasts(root, day, rows)
    return DateForecast(day, rows, path, replaced, inputs.warmup_dates)


__all__ = ["DateForecast", "forecast_date"]
