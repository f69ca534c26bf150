"""Ingestion assets: landed DBN files -> validated raw_bars partitions -> continuous_bars."""


import contextlib
import shutil
import uuid
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import dagster as dg
import polars as pl

from assets.common import (
    OWNERS,
    check_result,
    code_version_of,
    markdown_table,
    passed_validation,
    report_warnings,
)
from assets.common.partitions import landed_files, partition_dates, trade_dates, window_dates
from foxhunt_pipeline.contracts import schemas
from foxhunt_pipeline.contracts.plausibility import DEFAULT_JUMP_MULTIPLE, DEFAULT_JUMP_WINDOW
from foxhunt_pipeline.ingest import decode as dbn_decode
from foxhunt_pipeline.instruments.rolls import trade_date
from foxhunt_pipeline.storage import artifact_sync, continuous_dates, object_store
from foxhunt_pipeline.storage import trade_dates as stored
from resources.storage import FoxhuntStorage

RAW_CHECK = "raw_bars_contract"
CONTINUOUS_CHECK = "continuous_bars_contract"
PRICE_JUMP_CHECK = "continuous_bars_price_jumps"
HELD_BACK = "held_back"  # the price-jump check's (root, date) pairs not stored, one line


class ContinuousBarsConfig(dg.Config):
    """Thresholds of the price-jump check (see contracts.plausibility); a multiple of 0 turns
    it off."""

    price_jump_multiple: float = DEFAULT_JUMP_MULTIPLE
    price_jump_window: int = DEFAULT_JUMP_WINDOW


@contextlib.contextmanager
def landed_copy(storage: FoxhuntStorage, key: str) -> Iterator[Path]:
    """The landed file as a local path: itself on a local landing zone, else a scratch copy
    (removed afterwards; the landed object is never touched)."""
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
    backfill_policy=dg.BackfillPolicy.single_run(),
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
    keys = context.partition_keys
    if len(keys) == 1:  # one landed file: the sensor's runs, a UI click
        metadata, result = _ingest(context, storage, keys[0])
        object_store.refresh_duckdb_views(storage.duckdb_path, storage.warehouse_root)
        yield dg.MaterializeResult(metadata=metadata)
        yield check_result(RAW_CHECK, result)
        return
    # a range of landed files in one run (foxhunt materialize, a UI backfill): the start-up of
    # a run costs more than decoding a day of bars. A file that fails is named and the run
    # fails, after every other file of the range was ingested (foxhunt materialize then runs
    # the range's files one by one, so each gets its own result).
    failed: list[str] = []
    for key in keys:
        try:
            metadata, result = _ingest(context, storage, key)
        except dg.Failure as e:
            failed.append(f"{key}: {e.description}")
            continue
        context.add_asset_metadata(metadata, partition_key=key)  # each file its own numbers
        if not result.passed:
            failed.append(f"{key}: contract failed ({result.message})")
    object_store.refresh_duckdb_views(storage.duckdb_path, storage.warehouse_root)
    if failed:
        raise dg.Failure(description=f"{len(failed)} of {len(keys)} landed files failed: "
                         + "; ".join(failed[:5]), allow_retries=False)
    yield dg.MaterializeResult()
    yield check_result(RAW_CHECK, passed_validation())


def _ingest(context: dg.AssetExecutionContext, storage: FoxhuntStorage, key: str):
    """Decode and validate one landed file into its raw_bars partition: (metadata, result)."""
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

    result = report.validation  # streamed: the partition never sits in memory whole
    preview = pl.read_parquet(staging, n_rows=10)
    live = object_store.raw_bars_partition_upath(root, key)
    if result.passed:
        where = object_store.put_file(staging, live)
    else:
        where = object_store.put_file(
            staging, root / "_quarantine" / "raw_bars" / live.parent.name / "data.parquet")
        context.log.error(f"{key}: contract failed, kept at {where}; live partition unchanged")
    metadata = {
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
        **report_warnings(context, report.warnings),
    }
    return metadata, result


@dg.asset(
    partitions_def=trade_dates,
    backfill_policy=dg.BackfillPolicy.single_run(),
    deps=[dg.AssetDep(raw_bars, partition_mapping=dg.AllPartitionMapping())],
    group_name="ingestion",
    kinds={"polars", "parquet", "duckdb"},
    owners=OWNERS,
    code_version=code_version_of("foxhunt_pipeline.storage.continuous_dates", "foxhunt_pipeline.instruments.rolls"),
    check_specs=[
        dg.AssetCheckSpec(
            CONTINUOUS_CHECK, asset="continuous_bars", blocking=True,
            description="pandera contract of the continuous series plus segment bookkeeping",
        ),
        dg.AssetCheckSpec(
            PRICE_JUMP_CHECK, asset="continuous_bars", blocking=False,
            description="likely bad prints (contracts.plausibility: a jump beyond price_jump_multiple x "
            "the recent range that the next bars do not confirm, a move no market makes, an opening "
            "bar far too wide): the flagged root is not stored on that date (its previous version "
            "stays) and the check fails naming root, date, bar and file; the other roots and dates "
            "flow on",
        ),
    ],
    description="One front-month series per root rolled by volume (see foxhunt_pipeline.instruments.rolls "
    "for the rule), de-duplicated across landed files, one partition per CME trade date (a range "
    "runs as one run); roll table in DuckDB `rolls`. A date reads only the raw files holding it.",
)
def continuous_bars(
    context: dg.AssetExecutionContext, config: ContinuousBarsConfig, storage: FoxhuntStorage
):
    root = storage.warehouse_root
    first, last = window_dates(context)
    days = [d for d in {*continuous_dates.all_dates(root), *stored.stored_dates(root, "continuous_bars")}
            if first <= d <= last]
    failed: list = []

    def passes(frame: pl.DataFrame) -> bool:
        result = schemas.validate_frame(frame, schemas.continuous_bars_schema())
        if not result.passed:
            failed.append(result)
        return result.passed

    build = continuous_dates.build_dates(root, days, validate=passes,
                                         jump_multiple=config.price_jump_multiple,
                                         jump_window=config.price_jump_window)
    object_store.refresh_duckdb_views(storage.duckdb_path, root, rolls=build.rolls)
    if failed:
        context.log.error(f"continuous_bars contract failed on {len(failed)} date(s); their previous "
                          "versions left in place")
    if build.stale:
        build.notes.append((last, _stale_note(build.stale)))
    for key in context.partition_keys:  # each partition's own numbers (a range runs as one run)
        path = stored.date_dir(root, "continuous_bars", date.fromisoformat(key))
        context.add_asset_metadata(_partition_metadata(context, build, key, path), partition_key=key)
    yield dg.MaterializeResult()
    yield check_result(CONTINUOUS_CHECK, failed[0] if failed else passed_validation())
    yield _price_jump_result(build, config)


def _stale_note(stale: list[date]) -> str:
    """What to do about stored dates outside the run whose front late data moved."""
    return (f"continuous_bars: late data moved the front of {len(stale)} stored date(s) outside "
            f"this run ({stale[0]} .. {stale[-1]}); foxhunt materialize rebuilds them next "
            f"(or run: foxhunt materialize continuous_bars features --from {stale[0]} "
            f"--to {stale[-1]})")


def _price_jump_result(build, config: ContinuousBarsConfig) -> dg.AssetCheckResult:
    """The price-jump check: the roots and dates it kept from being stored and the first
    flagged bars."""
    blocked = "; ".join(build.blocked.values())
    return dg.AssetCheckResult(
        check_name=PRICE_JUMP_CHECK,
        passed=not build.blocked,
        # not blocking the run: the other dates flow on; the flagged dates were not stored
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "flagged_rows": dg.MetadataValue.int(build.jumps),
            "blocked_dates": ", ".join(map(str, build.blocked)),
            HELD_BACK: build.held_back,
            "message": blocked or "no likely bad print",
            "multiple": config.price_jump_multiple,
            "window": dg.MetadataValue.int(config.price_jump_window),
            "first_flagged": dg.MetadataValue.md(markdown_table(build.first_jumps, 20)),
        },
    )


def _of_dates(rows: pl.DataFrame, lo: date, hi: date) -> pl.DataFrame:
    """The rows (with ``ts_event``) whose CME trade date is in [lo, hi]."""
    if rows.is_empty() or "ts_event" not in rows.columns:
        return rows
    return rows.filter(trade_date(pl.col("ts_event")).is_between(lo, hi))


def _partition_metadata(context, build, key: str, path) -> dict:
    """One trade-date partition's own metadata: its rows, rolls, duplicates, jumps and
    warnings, not the run's totals."""
    lo, hi = partition_dates(key)
    mine = {d: n for d, n in build.rows.items() if lo <= d <= hi}
    per_date = pl.DataFrame({"trade_date": list(mine), "rows": list(mine.values())},
                            schema={"trade_date": pl.Date, "rows": pl.Int64})
    return {
        "rows": dg.MetadataValue.int(int(per_date["rows"].sum())),
        "dates": dg.MetadataValue.int(per_date.height),
        "per_date": dg.MetadataValue.md(markdown_table(per_date, 5)),
        "rolls": dg.MetadataValue.md(markdown_table(
            build.rolls.filter(pl.col("roll_date").is_between(lo, hi)), 20)),
        "blocked_dates": ", ".join(str(d) for d in build.blocked if lo <= d <= hi),
        "conflicting_duplicates": dg.MetadataValue.int(sum(n for d, n in build.day_conflicts.items()
                                                           if lo <= d <= hi)),
        "first_conflicting_duplicates": dg.MetadataValue.md(markdown_table(
            _of_dates(build.first_conflicts, lo, hi), 20)),
        "path": dg.MetadataValue.path(str(path)),
        **report_warnings(context, build.warnings_of(lo, hi)),
    }
