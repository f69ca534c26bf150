"""Tables partitioned by CME trade date: ``<root>/<table>/trade_date=YYYY-MM-DD/<part>.parquet``.

One directory per trade date, so rebuilding a date replaces only its files and a reader of
the whole table (the DuckDB view, ``scan_table``) globs every date. A date may hold several
parts (``features`` writes one per root, so a build holds one root's segment at a time);
``replace_date`` removes the parts a new build did not write.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, timedelta

import polars as pl
from upath import UPath

from foxhunt_pipeline.storage import object_store

PREFIX = "trade_date="


def partition_key_of(day: date) -> str:
    """The weekday trade-date partition (Dagster key) holding ``day``: a stray weekend date
    belongs to the Friday before."""
    while day.weekday() >= 5:
        day -= timedelta(days=1)
    return day.isoformat()


def date_dir(root: UPath, table: str, day: date) -> UPath:
    return root / table / f"{PREFIX}{day.isoformat()}"


def table_glob(root: UPath, table: str) -> str:
    return str(root / table / f"{PREFIX}*" / "*.parquet")


def date_parts(root: UPath, table: str) -> dict[date, list[UPath]]:
    """Every stored date of ``table`` and its parquet parts, in date order."""
    base = root / table
    if not base.is_dir():
        return {}
    out: dict[date, list[UPath]] = {}
    for d in base.iterdir():
        if not d.name.startswith(PREFIX):
            continue
        parts = sorted(d.glob("*.parquet"), key=str)
        if parts:
            out[date.fromisoformat(d.name[len(PREFIX):])] = parts
    return dict(sorted(out.items()))


def stored_dates(root: UPath, table: str) -> list[date]:
    return list(date_parts(root, table))


def has_dates(root: UPath, table: str) -> bool:
    return bool(date_parts(root, table))


def write_part(root: UPath, table: str, day: date, frame: pl.DataFrame, part: str = "data",
               compression: str = "zstd") -> UPath:
    return object_store.write_parquet(frame, date_dir(root, table, day) / f"{part}.parquet",
                                      compression=compression)


def replace_date(root: UPath, table: str, day: date, written: Iterable[str]) -> None:
    """Drop the parts of ``day`` that the latest build of it did not write."""
    keep = {f"{p}.parquet" for p in written}
    d = date_dir(root, table, day)
    if not d.is_dir():
        return
    for p in d.glob("*.parquet"):
        if p.name not in keep:
            p.unlink()


def read_dates(
    root: UPath,
    table: str,
    start: date | None = None,
    end: date | None = None,
    columns: list[str] | None = None,
    where: pl.Expr | None = None,
) -> pl.DataFrame | None:
    """The rows of the dates in ``[start, end]`` (both inclusive, None = open), date by date;
    None when no stored date falls in the range."""
    frames = []
    for day, parts in date_parts(root, table).items():
        if (start is not None and day < start) or (end is not None and day > end):
            continue
        for p in parts:
            f = object_store.read_parquet(p, columns=columns)
            frames.append(f.filter(where) if where is not None else f)
    if not frames:
        return None
    return pl.concat(frames, how="vertical_relaxed")


def scan_table(root: UPath, table: str, start: date | None = None, end: date | None = None
               ) -> pl.LazyFrame | None:
    """A lazy scan of the dates in ``[start, end]`` (local roots: polars reads only what the
    query needs; stores: each part is read whole)."""
    parts = [p for day, ps in date_parts(root, table).items()
             if (start is None or day >= start) and (end is None or day <= end) for p in ps]
    if not parts:
        return None
    if object_store.is_local(root):
        return pl.scan_parquet([p.path for p in parts], hive_partitioning=False)
    return pl.concat([object_store.read_parquet(p).lazy() for p in parts], how="vertical_relaxed")


__all__ = [
    "date_dir", "date_parts", "partition_key_of", "has_dates", "read_dates", "replace_date", "scan_table",
    "stored_dates", "table_glob", "write_part",
]
