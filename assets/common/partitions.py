"""The trade-date and landed-file partitions the ingestion, feature and forecasting assets
share, and the dates a partition holds."""

import os
from datetime import date, timedelta

import dagster as dg

landed_files = dg.DynamicPartitionsDefinition(name="landed_files")

# CME trade dates are Monday to Friday (Sunday evening's session is Monday's); a partition's
# window runs to the next weekday, so a stray weekend date belongs to the Friday before.
# ``end_offset=1``: the evening session already trades the next day's date.
HISTORY_START_ENV = "FOXHUNT_HISTORY_START"
trade_dates = dg.TimeWindowPartitionsDefinition(
    cron_schedule="0 0 * * 1-5", fmt="%Y-%m-%d", end_offset=1, timezone="UTC",
    start=os.environ.get(HISTORY_START_ENV, "2010-01-01"),
)


def window_dates(context: dg.AssetExecutionContext) -> tuple[date, date]:
    """First and last (inclusive) calendar date of the run's partition window."""
    window = context.partition_time_window
    return window.start.date(), window.end.date() - timedelta(days=1)


def partition_dates(key: str) -> tuple[date, date]:
    """First and last trade date a weekday partition holds (a Friday holds the weekend)."""
    day = date.fromisoformat(key)
    return day, day + timedelta(days=2 if day.weekday() == 4 else 0)
