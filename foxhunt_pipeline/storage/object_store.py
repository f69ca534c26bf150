"""The warehouse layout on any fsspec filesystem, addressed by ``UPath`` URLs.

``foxhunt_pipeline.storage.warehouse`` is the local implementation (``atomic_write``
writes, DuckDB views over local globs). This module gives the same layout - the same
``raw_bars/source_file=<quoted key>/data.parquet`` and ``<table>/data.parquet`` names -
on ``s3://``, ``gs://``, ``az://``, ``memory://`` or ``file://`` roots, so a cluster
deployment points ``FOXHUNT_WAREHOUSE_URL`` at a bucket and nothing else changes.

Atomicity: on a local root the write goes through ``warehouse.atomic_write``; on an
object store the file is serialised in memory and sent as one object PUT, which
readers see either whole or not at all (S3, GCS and Azure Blob are strongly
consistent for a single object), so no temporary key is needed.
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from upath import UPath

from foxhunt_pipeline.config.paths import FoxhuntPaths
from foxhunt_pipeline.contracts.tables import (
    PART_TABLES,
    RAW_BARS,
    RAW_BARS_ARROW_SCHEMA,
    RAW_BARS_POLARS_SCHEMA,
    VIEW_TABLES,
)
from foxhunt_pipeline.storage import forecast_views
from foxhunt_pipeline.storage import warehouse as local

WAREHOUSE_URL_ENV = "FOXHUNT_WAREHOUSE_URL"
ARTIFACTS_URL_ENV = "FOXHUNT_ARTIFACTS_URL"
LANDING_URL_ENV = "FOXHUNT_LANDING_URL"
LOCAL_PROTOCOLS = ("", "file", "local")


def _root(url: str | os.PathLike[str] | None, env: str, default: os.PathLike[str]) -> UPath:
    raw = url if url is not None else (os.environ.get(env) or None)
    if raw is None:
        return UPath(default)
    if not str(raw).strip():
        raise ValueError(f"empty storage URL {raw!r} (unset {env} for the local default)")
    return UPath(raw)


def warehouse_root(url: str | os.PathLike[str] | None = None,
                   home: str | os.PathLike[str] | None = None) -> UPath:
    """``url``, else ``$FOXHUNT_WAREHOUSE_URL`` (e.g. ``s3://bucket/foxhunt/warehouse``),
    else the local ``$FOXHUNT_HOME/warehouse``. Credentials come from the filesystem's
    usual sources (for s3fs: the AWS environment, config files or the pod's IAM role)."""
    return _root(url, WAREHOUSE_URL_ENV, FoxhuntPaths.from_env(home).warehouse)


def artifacts_root(url: str | os.PathLike[str] | None = None,
                   home: str | os.PathLike[str] | None = None) -> UPath:
    """Checkpoints and their pointers: ``url``, ``$FOXHUNT_ARTIFACTS_URL`` or
    ``$FOXHUNT_HOME/checkpoints``."""
    return _root(url, ARTIFACTS_URL_ENV, FoxhuntPaths.from_env(home).checkpoints)


def landing_root(url: str | os.PathLike[str] | None = None,
                 home: str | os.PathLike[str] | None = None) -> UPath:
    """Where DBN files land: ``url``, ``$FOXHUNT_LANDING_URL`` or ``$FOXHUNT_HOME/landing``."""
    return _root(url, LANDING_URL_ENV, FoxhuntPaths.from_env(home).landing)


def is_local(path: UPath) -> bool:
    return path.protocol in LOCAL_PROTOCOLS


def raw_bars_partition_upath(root: UPath, partition_key: str) -> UPath:
    if not partition_key:
        raise ValueError("empty partition key")
    return root / RAW_BARS / local.partition_dir_name(partition_key) / "data.parquet"


def table_upath(root: UPath, table: str) -> UPath:
    """Single-file tables (continuous_bars, features): ``<root>/<table>/data.parquet``."""
    return root / table / "data.parquet"


def write_parquet(data: pl.DataFrame | pa.Table, path: UPath, *, compression: str = "zstd"
                  ) -> UPath:
    """Write one parquet file, atomically as seen by readers (see the module docstring)."""
    if is_local(path):
        local.write_parquet_atomic(data, path.path, compression=compression)
        return path
    table = local.plain_strings(data)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, **local.parquet_options(table, compression))
    path.parent.mkdir(parents=True, exist_ok=True)  # a no-op on flat object stores
    path.write_bytes(buffer.getvalue())
    return path


def read_parquet(path: UPath, columns: list[str] | None = None) -> pl.DataFrame:
    if not path.is_file():
        raise FileNotFoundError(f"no parquet file at {path}")
    if is_local(path):
        return pl.read_parquet(path.path, columns=columns)
    with path.open("rb") as fh:
        return pl.from_arrow(pq.read_table(fh, columns=columns))  # type: ignore[return-value]


def put_file(local_file: os.PathLike[str], dest: UPath) -> UPath:
    """Move a finished local file (a staging file of ours) to ``dest``, replacing it whole:
    a rename on a local root, one upload on a store."""
    if is_local(dest):
        local.atomic_write(dest.path, lambda tmp: _link_or_copy(local_file, tmp))
        Path(local_file).unlink()
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.fs.put_file(os.fspath(local_file), dest.path)
    Path(local_file).unlink()
    return dest


def write_raw_bars_partition(root: UPath, partition_key: str, data: pl.DataFrame | pa.Table
                             ) -> UPath:
    return write_parquet(data, raw_bars_partition_upath(root, partition_key))


def raw_bars_files(root: UPath) -> list[UPath]:
    base = root / RAW_BARS
    if not base.is_dir():
        return []
    return sorted((p for p in base.glob("source_file=*/data.parquet")), key=str)


def scan_raw_bars(root: UPath) -> pl.LazyFrame:
    """All raw_bars partitions as one LazyFrame, read through the root's own filesystem
    (pyarrow dataset over fsspec), so it works wherever fsspec does; empty with the
    contract schema when there are none."""

    if is_local(root):
        return local.scan_raw_bars(root.path)
    files = raw_bars_files(root)
    if not files:
        return pl.LazyFrame(schema=RAW_BARS_POLARS_SCHEMA)
    filesystem = pafs.PyFileSystem(pafs.FSSpecHandler(root.fs))
    dataset = pads.dataset([p.path for p in files], schema=RAW_BARS_ARROW_SCHEMA,
                           format="parquet", filesystem=filesystem)
    return pl.scan_pyarrow_dataset(dataset)


def refresh_duckdb_views(duckdb_path: os.PathLike[str], root: UPath,
                         rolls: pl.DataFrame | None = None) -> list[str]:
    """The DuckDB catalogue over ``root``: plain paths when local; on a store, views over
    the URLs, read through the root's fsspec filesystem (``connect_catalogue`` registers it)."""
    if is_local(root):
        return local.refresh_duckdb_views(duckdb_path, root.path, rolls)
    sources: dict[str, str] = {}
    if raw_bars_files(root):
        sources[RAW_BARS] = str(root / RAW_BARS / "source_file=*" / "data.parquet")
    for t in VIEW_TABLES[1:]:
        if (root / t).is_dir() and next(iter((root / t).glob(local.DATED_PARTS)), None) is not None:
            sources[t] = str(root / t / local.DATED_PARTS)
        elif table_upath(root, t).is_file():
            sources[t] = str(table_upath(root, t))
    for t in PART_TABLES:
        if (root / t).is_dir() and next(iter((root / t).glob("*.parquet")), None) is not None:
            sources[t] = str(root / t / "*.parquet")
    forecasts = root / forecast_views.TABLE
    if forecasts.is_dir() and next(iter(forecasts.glob(local.DATED_PARTS)), None) is not None:
        sources[forecast_views.TABLE] = str(forecasts / local.DATED_PARTS)
    return local.write_duckdb_views(duckdb_path, sources, rolls, filesystem=root.fs)


def write_table_part(root: UPath, table: str, name: str, data: pl.DataFrame) -> UPath:
    """Append-only tables on a store (e.g. ``model_evaluations``): one object per write, so
    concurrent writers in different pods never read-modify-write the same object."""
    return write_parquet(data, root / table / f"{name}.parquet")


def read_table_parts(root: UPath, table: str, columns: list[str] | None = None) -> pl.DataFrame:
    """Every part of an append-only table, columns unioned (empty when there are none);
    only ``columns`` (those a part has) when given, so the others are never all in memory."""
    base = root / table
    parts = sorted(base.glob("*.parquet"), key=str) if base.is_dir() else []

    def read(part: UPath) -> pl.DataFrame:
        frame = read_parquet(part)
        return frame if columns is None else frame.select([c for c in columns if c in frame.columns])

    frames = [read(p) for p in parts]
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


def connect_catalogue(duckdb_path: os.PathLike[str], root: UPath, read_only: bool = True):
    """A DuckDB connection whose views resolve, wherever the warehouse lives."""
    con = duckdb.connect(os.fspath(duckdb_path), read_only=read_only)
    if not is_local(root):
        con.register_filesystem(root.fs)
        return con
    # the stored views name absolute paths; temp views (searched first, nothing written)
    # name this warehouse, so a moved or copied home never reads its old place
    sources = local.view_sources(root.path)
    for table, source in sources.items():
        if table != forecast_views.TABLE:
            con.execute(local.view_sql(table, source, temp=True, con=con)).fetchall()
    if forecast_views.TABLE in sources:
        local.forecast_catalogue(con, sources, temp=True)
    return con


def _link_or_copy(src: os.PathLike[str], dest: Path) -> None:
    """A hard link where ``src`` shares the file system (no copy), else a copy."""
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)
