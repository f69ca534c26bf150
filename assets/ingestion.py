"""Ingestion assets: landed DBN files -> validated raw_bars partitions -> continuous_bars."""


import contextlib
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import polars as pl

from assets.common import EAGER_AFTER_CHECKS, OWNERS, check_result, code_version_of, markdown_table
from foxhunt_pipeline.contracts.plausibility import DEFAULT_JUMP_MULTIPLE, DEFAULT_JUMP_WINDOW
from resources.storage import FoxhuntStorage

landed_files = dg.DynamicPartitionsDefinition(name="landed_files")

RAW_CHECK = "raw_bars_contract"
CONTINUOUS_CHECK = "continuous_bars_contract"
PRICE_JUMP_CHECK = "continuous_bars_price_jumps"


class ContinuousBarsConfig(dg.Config):
    """Thresholds of the non-blocking price-jump warning (see contracts.plausibility)."""

    price_jump_multiple: float = DEFAULT_JUMP_MULTIPLE
    price_jump_window: int = DEFAULT_JUMP_WINDOW


@contextlib.contextmanager
def landed_copy(storage: FoxhuntStorage, key: str) -> Iterator[Path]:
    """The landed file as a local path: itself on a local landing zone, else a scratch copy
    (removed afterwards; the landed object is never touched)."""
    from foxhunt_pipeline.storage import artifact_sync

    src = storage.landing_root / key
    if not src.is_file():
        raise dg.Failure(f"landed file {src} for partition {key!r} does not exist")
    local = artifact_sync.local_path(src)
    if local is not None:
        yield local
        return
    copy_dir = storage.run_scratch / "landed" / uuid.uuid4().hex
    copy_dir.mkdir(parents=True)
    try:
        src.fs.get_file(src.path, str(copy_dir / key))
        yield copy_dir / key
    finally:
        shutil.rmtree(copy_dir, ignore_errors=True)


@dg.asset(
    partitions_def=landed_files,
    group_name="ingestion",
    kinds={"polars", "parquet", "duckdb"},
    owners=OWNERS,
    code_version=code_version_of("foxhunt_pipeline.ingest.decode", "foxhunt_pipeline.contracts.schemas"),
    check_specs=[
        dg.AssetCheckSpec(
            RAW_CHECK,
            asset="raw_bars",
            blocking=True,
            description="pandera contract: OHLC consistency, finite positive prices, volume <= 1e9, "
            "unique keys, ts_event inside the file's range (and 2010..tomorrow) and increasing "
            "per instrument",
        )
    ],
    description="Decoded OHLCV bars of one landed DBN file (partition key = file name): outright "
    "contracts only, float64 prices, ts_event as ns UTC. A file that fails its contract is kept in "
    "quarantine and the previous version of the partition stays live.",
)
def raw_bars(context: dg.AssetExecutionContext, storage: FoxhuntStorage):
    from foxhunt_pipeline.ingest import decode as dbn_decode
    from foxhunt_pipeline.storage import object_store

    key = context.partition_key
    root = storage.warehouse_root
    with landed_copy(storage, key) as src:
        # in the run's scratch area: removed with it on failure, swept if the run is killed
        staging = storage.run_scratch / f"{uuid.uuid4().hex}.parquet"
        try:
            report = dbn_decode.ingest_dbn_file(
                src, staging, source_file=key, validate=True,
                schemas=dbn_decode.HOME_BAR_SCHEMAS,
            )
        except dbn_decode.DbnInputError as e:
            staging.unlink(missing_ok=True)
            raise dg.Failure(description=str(e), allow_retries=False) from e
    for w in report.warnings:
        context.log.warning(f"{key}: {w}")

    result = report.validation  # streamed: the partition never sits in memory whole
    preview = pl.read_parquet(staging, n_rows=10)
    live = object_store.raw_bars_partition_upath(root, key)
    if result.passed:
        where = object_store.put_file(staging, live)
    else:
        where = object_store.put_file(
            staging, root / "_quarantine" / "raw_bars" / live.parent.name / "data.parquet")
        context.log.error(f"{key}: contract failed, kept at {where}; live partition unchanged")
    object_store.refresh_duckdb_views(storage.duckdb_path, root)

    yield dg.MaterializeResult(
        metadata={
            "rows": dg.MetadataValue.int(report.rows_out),
            "rows_in_file": dg.MetadataValue.int(report.rows_in),
            "spreads_dropped": dg.MetadataValue.int(report.spreads_dropped),
            "duplicates_dropped": dg.MetadataValue.int(report.duplicates_dropped),
            "conflicting_duplicates": dg.MetadataValue.int(report.conflicting_duplicates),
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
    code_version=code_version_of("foxhunt_pipeline.instruments.rolls"),
    automation_condition=EAGER_AFTER_CHECKS,
    check_specs=[
        dg.AssetCheckSpec(
            CONTINUOUS_CHECK, asset="continuous_bars", blocking=True,
            description="pandera contract of the continuous series plus segment bookkeeping",
        ),
        dg.AssetCheckSpec(
            PRICE_JUMP_CHECK, asset="continuous_bars", blocking=False,
            description="warning: bars whose range exceeds price_jump_multiple x the median range "
            "of the previous price_jump_window bars of the same contract (likely bad prints)",
        ),
    ],
    description="One front-month series per root rolled by volume (see foxhunt_pipeline.instruments.rolls "
    "for the rule), de-duplicated across landed files; roll table in DuckDB `rolls`.",
)
def continuous_bars(
    context: dg.AssetExecutionContext, config: ContinuousBarsConfig, storage: FoxhuntStorage
):
    from foxhunt_pipeline.contracts import plausibility, schemas
    from foxhunt_pipeline.instruments import rolls as continuous
    from foxhunt_pipeline.storage import object_store

    root = storage.warehouse_root
    raw = object_store.scan_raw_bars(root)
    frame, rolls = continuous.build_continuous(raw)
    conflicts = continuous.duplicate_conflicts(raw)
    if conflicts.count:
        context.log.warning(f"continuous_bars: {conflicts.message}")
    result = schemas.validate_frame(frame, schemas.continuous_bars_schema())
    path = storage.table_path("continuous_bars")
    if result.passed:
        object_store.write_parquet(frame, path)
        object_store.refresh_duckdb_views(storage.duckdb_path, root, rolls=rolls)
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
            "conflicting_duplicates": dg.MetadataValue.int(conflicts.count),
            "first_conflicting_duplicates": dg.MetadataValue.md(
                markdown_table(conflicts.first, 20)
            ),
        }
    )
    yield check_result(CONTINUOUS_CHECK, result)
    jumps = plausibility.price_jumps(
        frame, config.price_jump_multiple, config.price_jump_window
    )
    if jumps.height:
        context.log.warning(
            f"continuous_bars: {jumps.height} bars jump beyond {config.price_jump_multiple:g}x "
            "the recent range (likely bad prints); see the price-jump check"
        )
    yield dg.AssetCheckResult(
        check_name=PRICE_JUMP_CHECK,
        passed=jumps.height == 0,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "flagged_rows": dg.MetadataValue.int(jumps.height),
            "multiple": config.price_jump_multiple,
            "window": dg.MetadataValue.int(config.price_jump_window),
            "first_flagged": dg.MetadataValue.md(markdown_table(jumps, 20)),
        },
    )
