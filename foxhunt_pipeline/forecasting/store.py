"""Stored forecasts: ``champion_forecasts/trade_date=D/<model>-v<version>.parquet``, one
file per trade date and model version.

A version writes only its own file, so a new champion's forecast of a date sits beside the
old one and never replaces it; the ``forecasts`` view shows, per date, the version whose
file was made first (``storage.forecast_views``). A version that forecasts a date again (its
features were rebuilt) replaces its own file and keeps its first ``made_at``, so which
version a date shows never changes.
"""

from __future__ import annotations

from datetime import date

import polars as pl
from upath import UPath

from foxhunt_pipeline.storage import object_store, trade_dates
from foxhunt_pipeline.storage.forecast_views import TABLE


def part_name(model: str, version: str) -> str:
    return f"{model}-v{version}"


def part_path(root: UPath, day: date, model: str, version: str) -> UPath:
    return trade_dates.date_dir(root, TABLE, day) / f"{part_name(model, version)}.parquet"


def write_forecasts(root: UPath, day: date, rows: pl.DataFrame) -> tuple[UPath, bool]:
    """Store one version's rows of ``day`` (atomically); returns the path and whether it
    replaced that version's earlier file of the date."""
    model, version = str(rows["model"][0]), str(rows["version"][0])
    path = part_path(root, day, model, version)
    replaced = path.is_file()
    if replaced:
        first = object_store.read_parquet(path, columns=["made_at"])["made_at"].min()
        rows = rows.with_columns(made_at=pl.lit(first, dtype=rows.schema["made_at"]))
    object_store.write_parquet(rows, path)
    return path, replaced


def date_versions(root: UPath, day: date) -> pl.DataFrame:
    """(model, version, made_at, rows) of every version that forecast ``day``, first made
    first."""
    parts = trade_dates.date_parts(root, TABLE).get(day, [])
    rows = [object_store.read_parquet(p, columns=["model", "version", "made_at"])
            .group_by("model", "version").agg(pl.col("made_at").min(), pl.len().alias("rows"))
            for p in parts]
    if not rows:
        return pl.DataFrame(schema={"model": pl.String, "version": pl.String,
                                    "made_at": pl.Datetime("us", "UTC"), "rows": pl.UInt32})
    return pl.concat(rows).sort("made_at")


def live_rows(root: UPath, day: date, columns: list[str] | None = None) -> pl.DataFrame | None:
    """The rows the ``forecasts`` view shows for ``day`` (the first-made version's), or None."""
    versions = date_versions(root, day)
    if versions.is_empty():
        return None
    model, version = versions["model"][0], versions["version"][0]
    return object_store.read_parquet(part_path(root, day, model, version), columns=columns)


def held_positions(root: UPath, before: date) -> tuple[date | None, dict[str, tuple[int, float]]]:
    """The latest forecast date before ``before`` and, per root, the (contract_seq, position)
    its live rows ended in: where the next date's book starts."""
    earlier = [d for d in trade_dates.stored_dates(root, TABLE) if d < before]
    if not earlier:
        return None, {}
    rows = live_rows(root, earlier[-1], columns=["root", "ts_event", "contract_seq", "position"])
    if rows is None or rows.is_empty():
        return earlier[-1], {}
    last = rows.sort("ts_event").group_by("root").agg(pl.col("contract_seq").last(),
                                                      pl.col("position").last())
    return earlier[-1], {r: (int(s), float(p)) for r, s, p in last.iter_rows()}


__all__ = ["date_versions", "held_positions", "live_rows", "part_name", "part_path",
           "write_forecasts"]
