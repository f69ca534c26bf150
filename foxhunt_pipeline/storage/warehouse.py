"""The parquet warehouse and its DuckDB catalogue.

Every write goes to a temporary file in the target's directory and is renamed into
place, so a failed or killed run leaves the previous version readable. The DuckDB
catalogue is written the same way (``catalogue_writer``): a copy is changed and swapped
in whole, so a reader's open connection (a notebook, ``foxhunt sql``) never blocks a
write, and it keeps the version it opened until it reconnects. Writers take turns on a
lock file and each result is fully fetched before the next statement (duckdb 2).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import duckdb
import filelock
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from foxhunt_pipeline.basics.atomic import atomic_write, fsync_path, temp_sibling
from foxhunt_pipeline.contracts.tables import (
    PART_TABLES,
    RAW_BARS,
    RAW_BARS_POLARS_SCHEMA,
    VIEW_TABLES,
)
from foxhunt_pipeline.storage import forecast_views

CATALOGUE_LOCK_TIMEOUT_S = 120.0
#: a parquet file goes to disk through a buffer of this size: the writer makes a few small
#: writes per column (page header, page), ~3 ms of system time per features date as syscalls
WRITE_BUFFER_BYTES = 1 << 20
#: values the writer encodes per batch (pyarrow's default is 1,024): a features date is
#: some 5,500 rows of ~280 columns, and each batch of each column costs a fixed overhead
WRITE_BATCH_ROWS = 64 * 1024


class CatalogueBusyError(RuntimeError):
    """Another writer held the catalogue's lock for longer than the timeout."""


def write_parquet_atomic(
    data: pl.DataFrame | pa.Table, path: Path | str, *, compression: str = "zstd"
) -> Path:
    """Write one parquet file atomically (timestamps stay ``timestamp[ns, tz=UTC]``)."""
    table = plain_strings(data)

    def write(tmp: Path) -> None:
        with pa.output_stream(str(tmp), compression=None, buffer_size=WRITE_BUFFER_BYTES) as out:
            pq.write_table(table, out, **parquet_options(table, compression))

    return atomic_write(path, write)


def parquet_options(table: pa.Table, compression: str = "zstd") -> dict[str, Any]:
    """``pq.write_table`` options of every warehouse file. Plain parquet (zstd pages, the
    column types' own encodings), readable by any reader; only what the writer spends time
    on differs from pyarrow's defaults (``dictionary_columns``, ``statistics_columns``,
    ``WRITE_BATCH_ROWS``). A features date writes ~12% faster than with the defaults, at
    the same size (``benchmarks/history_scaling.py``)."""
    return {"compression": compression, "use_dictionary": dictionary_columns(table),
            "write_statistics": statistics_columns(table), "write_batch_size": WRITE_BATCH_ROWS}


def dictionary_columns(table: pa.Table) -> list[str]:
    """Dictionary-encode the string columns only: on float features a dictionary costs
    encoding time and bytes (a features date writes ~40% faster and ~25% smaller)."""
    return [f.name for f in table.schema if pa.types.is_string(f.type) or pa.types.is_dictionary(f.type)]


def statistics_columns(table: pa.Table) -> list[str]:
    """Min/max statistics for every column but the floating-point ones: readers skip files
    and row groups by time, root or contract, never by a feature's or a price's value, and
    the ~270 float columns of a features date spent ~7% of its write on them."""
    return [f.name for f in table.schema if not pa.types.is_floating(f.type)]


def plain_strings(data: pl.DataFrame | pa.Table) -> pa.Table:
    """Arrow for parquet: polars hands out string_view / large_string; plain string reads
    everywhere."""
    if not isinstance(data, pl.DataFrame):
        return data
    table = data.to_arrow()
    for i, f in enumerate(table.schema):  # the string columns only: a cast of the whole
        # table visits all ~280 columns of a features date, at twice the cost of to_arrow
        if pa.types.is_large_string(f.type) or pa.types.is_string_view(f.type):
            table = table.set_column(i, pa.field(f.name, pa.string(), f.nullable),
                                     table.column(i).cast(pa.string()))
    return table


PARTITION_PREFIX = "source_file="
MAX_DIR_NAME = 200  # bytes; NAME_MAX is 255 and temp names add a few


def partition_dir_name(partition_key: str) -> str:
    """Hive directory name for a partition key: every unsafe byte percent-encoded. A key
    too long for one name (a 250-byte file name can triple when encoded) keeps a readable
    prefix and ends in ``~`` plus a hash of the whole key; shorter keys are unchanged."""
    name = f"{PARTITION_PREFIX}{quote(partition_key, safe='')}"
    if len(name) <= MAX_DIR_NAME:
        return name
    digest = hashlib.sha256(partition_key.encode()).hexdigest()[:16]
    budget = MAX_DIR_NAME - len(PARTITION_PREFIX) - 1 - len(digest)
    prefix = ""
    for ch in partition_key:  # whole characters, so no escape is cut in half
        q = quote(ch, safe="")
        if len(prefix) + len(q) > budget:
            break
        prefix += q
    return f"{PARTITION_PREFIX}{prefix}~{digest}"


def raw_bars_partition_path(warehouse: Path | str, partition_key: str) -> Path:
    if not partition_key:
        raise ValueError("empty partition key")
    return Path(warehouse) / RAW_BARS / partition_dir_name(partition_key) / "data.parquet"


DATED_PARTS = "trade_date=*/*.parquet"  # storage.trade_dates: continuous_bars, features


def table_path(warehouse: Path | str, table: str) -> Path:
    """Single-file tables (continuous_bars, features): ``warehouse/<table>/data.parquet``."""
    return Path(warehouse) / table / "data.parquet"


def _raw_bars_files(warehouse: Path | str) -> list[Path]:
    root = Path(warehouse) / RAW_BARS
    return sorted(root.glob("source_file=*/data.parquet")) if root.is_dir() else []


def _raw_bars_glob(warehouse: Path | str) -> str:
    return str(Path(warehouse) / RAW_BARS / "source_file=*" / "data.parquet")


def scan_raw_bars(warehouse: Path | str) -> pl.LazyFrame:
    """All raw_bars partitions as one LazyFrame; empty (with the contract schema) if none.

    ``source_file`` is a column inside each file, so hive parsing of the path is not
    needed (and cannot disagree with it).
    """

    files = _raw_bars_files(warehouse)
    if not files:
        return pl.LazyFrame(schema=RAW_BARS_POLARS_SCHEMA)
    return pl.scan_parquet(files, hive_partitioning=False)


def _sql_str(value: str | Path) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def refresh_duckdb_views(
    duckdb_path: Path | str, warehouse: Path | str, rolls: pl.DataFrame | None = None
) -> list[str]:
    """(Re)create a view per existing warehouse table and replace ``rolls`` when given.

    Returns the names of the views that now exist. A table whose parquet is missing
    gets no view (and a stale view of it is dropped), so a query never hits a
    missing-file error.
    """
    return write_duckdb_views(duckdb_path, view_sources(warehouse), rolls)


def view_sources(warehouse: Path | str) -> dict[str, str]:
    """The parquet glob or file of each view table that exists under ``warehouse`` now."""
    sources: dict[str, str] = {}
    if _raw_bars_files(warehouse):
        sources[RAW_BARS] = _raw_bars_glob(warehouse)
    for t in VIEW_TABLES[1:]:
        if next((Path(warehouse) / t).glob(DATED_PARTS), None) is not None:
            sources[t] = str(Path(warehouse) / t / DATED_PARTS)
        elif table_path(warehouse, t).is_file():  # a warehouse from before date partitions
            sources[t] = str(table_path(warehouse, t))
    if next((Path(warehouse) / forecast_views.TABLE).glob(DATED_PARTS), None) is not None:
        sources[forecast_views.TABLE] = str(Path(warehouse) / forecast_views.TABLE / DATED_PARTS)
    return sources


#: the CME trade date of a bar (17:00 CT starts the next day's session), as the partitions use it
TRADE_DATE_SQL = "CAST(timezone('America/Chicago', ts_event) + INTERVAL 7 HOUR AS DATE) AS trade_date"


def _read_sql(source: str) -> str:
    return f"read_parquet({_sql_str(source)}, hive_partitioning=false, union_by_name=true)"


def view_sql(table: str, source: str, *, temp: bool = False, con: Any = None) -> str:
    """The view of a table's parquet; a bar table (``ts_event``) also gets its ``trade_date``
    (``con`` looks the columns up)."""
    extra = ""
    if table in VIEW_TABLES and con is not None:
        names = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {_read_sql(source)}").fetchall()}
        extra = f", {TRADE_DATE_SQL}" if "ts_event" in names and "trade_date" not in names else ""
    return f"CREATE OR REPLACE {'TEMP ' if temp else ''}VIEW {table} AS SELECT *{extra} FROM {_read_sql(source)}"


def write_duckdb_views(
    duckdb_path: Path | str, sources: dict[str, str], rolls: pl.DataFrame | None = None,
    filesystem: Any = None,
) -> list[str]:
    """Point each view of ``VIEW_TABLES`` at its parquet glob in ``sources`` (dropping the
    others); ``filesystem`` (fsspec) is registered first for URLs DuckDB cannot open itself."""
    with catalogue_writer(duckdb_path) as con:
        if filesystem is not None:
            con.register_filesystem(filesystem)
        for t in (*VIEW_TABLES, *(t for t in PART_TABLES if t in sources)):
            if t in sources:
                con.execute(view_sql(t, sources[t], con=con)).fetchall()
            else:
                con.execute(f"DROP VIEW IF EXISTS {t}").fetchall()
        forecast_catalogue(con, sources)
        if rolls is not None:
            arrow_rolls = rolls.to_arrow()
            con.register("rolls_in", arrow_rolls)
            con.execute("CREATE OR REPLACE TABLE rolls AS SELECT * FROM rolls_in").fetchall()
            con.unregister("rolls_in")
    return sorted(sources)


def forecast_catalogue(con, sources: dict[str, str], temp: bool = False) -> None:
    """The views over the champion's forecasts (``forecast_views``), or none while no date
    was forecast."""
    if forecast_views.TABLE in sources:
        forecast_views.create_views(con, sources[forecast_views.TABLE], sources.get("features"),
                                    temp=temp)
        return
    for name in forecast_views.VIEWS:
        con.execute(f"DROP {'TEMP ' if temp else ''}VIEW IF EXISTS {name}").fetchall()


def _add_missing_columns(con, table: str, source: str) -> None:
    """A newer writer's columns are added to an existing table (older rows read NULL), so a
    schema that grows never breaks a home written by an older version."""
    have = {r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()}
    for name, dtype, *_ in con.execute(f"DESCRIBE {source}").fetchall():
        if name not in have:
            con.execute(f'ALTER TABLE {table} ADD COLUMN "{name}" {dtype}').fetchall()


def append_duckdb_table(duckdb_path: Path | str, table: str, df: pl.DataFrame) -> int:
    """Append rows to ``table``, creating it from ``df``'s schema first; returns its row count."""
    if not table.isidentifier():
        raise ValueError(f"invalid DuckDB table name {table!r}")
    with catalogue_writer(duckdb_path) as con:
        con.register("append_in", df.to_arrow())
        con.execute(
            f"CREATE TABLE IF NOT EXISTS {table} AS SELECT * FROM append_in LIMIT 0"
        ).fetchall()
        _add_missing_columns(con, table, "append_in")
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM append_in").fetchall()
        con.unregister("append_in")
        (count,) = con.execute(f"SELECT count(*) FROM {table}").fetchone()  # type: ignore[misc]
    return int(count)


@contextlib.contextmanager
def catalogue_writer(
    duckdb_path: Path | str, timeout_s: float = CATALOGUE_LOCK_TIMEOUT_S
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-write connection to a copy of the catalogue that replaces it whole when the
    block ends without error (on error the catalogue is untouched). Readers never hold up
    a write; two writers wait for each other up to ``timeout_s``."""
    duckdb_path = Path(duckdb_path)
    duckdb_path.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(f"{duckdb_path}.lock")
    try:
        lock.acquire(timeout=timeout_s)
    except filelock.Timeout as e:
        raise CatalogueBusyError(
            f"catalogue {duckdb_path} is being written by another process (lock "
            f"{duckdb_path}.lock held for over {timeout_s:.0f}s)") from e
    tmp = temp_sibling(duckdb_path)
    wal = Path(f"{duckdb_path}.wal")
    try:
        if duckdb_path.exists():
            shutil.copyfile(duckdb_path, tmp)
            if wal.exists():  # a writer killed before its checkpoint: replayed into the copy
                shutil.copyfile(wal, f"{tmp}.wal")
        con = duckdb.connect(str(tmp))
        try:
            yield con
            con.execute("CHECKPOINT").fetchall()
        finally:
            con.close()
        fsync_path(tmp)
        os.replace(tmp, duckdb_path)
        wal.unlink(missing_ok=True)  # it belonged to the old file
        fsync_path(duckdb_path.parent)
    finally:
        for leftover in (tmp, Path(f"{tmp}.wal")):
            leftover.unlink(missing_ok=True)
        lock.release()
