"""Ingestion assets: landed DBN files -> validated raw_bars partitions -> continuous_bars."""


import os
import uuid

import dagster as dg
import polars as pl

from assets.common import EAGER_AFTER_CHECKS, OWNERS, check_result, code_version_of, markdown_table
from resources.storage import FoxhuntStorage

landed_files = dg.DynamicPartitionsDefinition(name="landed_files")

RAW_CHECK = "raw_bars_contract"
CONTINUOUS_CHECK = "continuous_bars_contract"


@dg.asset(
    partitions_def=landed_files,
    group_name="ingestion",
    kinds={"polars", "parquet", "duckdb"},
    owners=OWNERS,
    code_version=code_version_of("foxhunt_pipeline.dbn_decode", "foxhunt_pipeline.schemas"),
    check_specs=[
        dg.AssetCheckSpec(
            RAW_CHECK,
            asset="raw_bars",
            blocking=True,
            description="pandera contract: OHLC consistency, finite positive prices, volume >= 0, "
            "unique keys, ts_event inside the file's range and increasing per instrument",
        )
    ],
    description="Decoded OHLCV bars of one landed DBN file (partition key = file name): outright "
    "contracts only, float64 prices, ts_event as ns UTC. A file that fails its contract is kept in "
    "quarantine and the previous version of the partition stays live.",
)
def raw_bars(context: dg.AssetExecutionContext, storage: FoxhuntStorage):
    from foxhunt_pipeline import dbn_decode, warehouse

    key = context.partition_key
    src = storage.landing / key
    if not src.exists():
        raise dg.Failure(f"landed file {src} for partition {key!r} does not exist")
    staging_dir = storage.warehouse / "_staging"
    staging_dir.mkdir(parents=True, exist_ok=True)
    staging = staging_dir / f"{uuid.uuid4().hex}.parquet"
    try:
        report = dbn_decode.ingest_dbn_file(src, staging, validate=True)
    except dbn_decode.DbnInputError as e:
        raise dg.Failure(description=str(e), allow_retries=False) from e
    for w in report.warnings:
        context.log.warning(f"{key}: {w}")

    result = report.validation  # streamed: the partition never sits in memory whole
    preview = pl.read_parquet(staging, n_rows=10)
    live = warehouse.raw_bars_partition_path(storage.warehouse, key)
    if result.passed:
        live.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging, live)
        where = live
    else:
        quarantine = storage.warehouse / "_quarantine" / "raw_bars" / live.parent.name
        quarantine.mkdir(parents=True, exist_ok=True)
        where = quarantine / "data.parquet"
        os.replace(staging, where)
        context.log.error(f"{key}: contract failed, kept at {where}; live partition unchanged")
    warehouse.refresh_duckdb_views(storage.duckdb_path, storage.warehouse)

    yield dg.MaterializeResult(
        metadata={
            "rows": dg.MetadataValue.int(report.rows_out),
            "rows_in_file": dg.MetadataValue.int(report.rows_in),
            "spreads_dropped": dg.MetadataValue.int(report.spreads_dropped),
            "duplicates_dropped": dg.MetadataValue.int(report.duplicates_dropped),
            "undef_price_rows": dg.MetadataValue.int(report.undef_price_rows),
            "schema": report.schema,
            "dbn_version": dg.MetadataValue.int(int(report.dbn_version)),
            "symbols": ", ".join(map(str, report.symbols)),
            "path": dg.MetadataValue.path(str(where)),
            "status": "live" if result.passed else "quarantined (contract failed)",
            "preview": dg.MetadataValue.md(markdown_table(preview, 10)),
        }
    )
    yield check_result(RAW_CHECK, result)


@dg.asset(
    deps=[raw_bars],
    group_name="ingestion",
    kinds={"polars", "parquet", "duckdb"},
    owners=OWNERS,
    code_version=code_version_of("foxhunt_pipeline.continuous"),
    automation_condition=EAGER_AFTER_CHECKS,
    check_specs=[
        dg.AssetCheckSpec(
            CONTINUOUS_CHECK, asset="continuous_bars", blocking=True,
            description="pandera contract of the continuous series plus segment bookkeeping",
        )
    ],
    description="One front-month series per root rolled by volume (see foxhunt_pipeline.continuous "
    "for the rule), de-duplicated across landed files; roll table in DuckDB `rolls`.",
)
def continuous_bars(context: dg.AssetExecutionContext, storage: FoxhuntStorage):
    from foxhunt_pipeline import continuous, schemas, warehouse

    raw = warehouse.scan_raw_bars(storage.warehouse)
    frame, rolls = continuous.build_continuous(raw)
    result = schemas.validate_frame(frame, schemas.continuous_bars_schema())
    path = storage.table_dir("continuous_bars") / "data.parquet"
    if result.passed:
        warehouse.write_parquet_atomic(frame, path)
        warehouse.refresh_duckdb_views(storage.duckdb_path, storage.warehouse, rolls=rolls)
    else:
        context.log.error("continuous_bars contract failed; previous version left in place")
    per_root = (
        frame.group_by("root").agg(
            pl.len().alias("bars"), pl.col("ts_event").min().alias("first"),
            pl.col("ts_event").max().alias("last"), pl.col("contract_seq").max().alias("rolls"),
        ).sort("root")
        if frame.height
        else pl.DataFrame()
    )
    yield dg.MaterializeResult(
        metadata={
            "rows": dg.MetadataValue.int(frame.height),
            "roots": dg.MetadataValue.md(markdown_table(per_root)),
            "rolls": dg.MetadataValue.md(markdown_table(rolls, 50)),
            "path": dg.MetadataValue.path(str(path)),
        }
    )
    yield check_result(CONTINUOUS_CHECK, result)
