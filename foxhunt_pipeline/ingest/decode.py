"""Landed DBN bar files -> the ``raw_bars`` parquet contract (docs/contracts.md).

Decoding is ``databento.DBNStore`` (``to_ndarray(count=...)``, over Arrow's zstd stream,
which detects a truncated file), never a hand-written parser. One pass, bounded memory:
the output is sorted by instrument and the file by time, so the lowest-id outright is
streamed straight to parquet while the others are held per instrument (in memory up to
a budget, then on disk) and written after it. Records already strictly increasing are
never sorted; an instrument that is not is sorted and deduplicated on its own. Three
threads overlap: a reader decompresses the next chunk, the caller splits and converts
this one, a writer encodes parquet (zstd and parquet release the GIL). Validation
screens each batch in numpy on the arrays it was built from
(:class:`~foxhunt_pipeline.ingest.batches.BatchScreen`) and leaves pandera for batches
that may fail (see :mod:`foxhunt_pipeline.contracts.schemas`).

The landed file is only ever opened for reading. This module runs the pass; the parts
live beside it: :mod:`~foxhunt_pipeline.ingest.dbn_file` (opening, metadata),
:mod:`~foxhunt_pipeline.ingest.symbols` (instrument -> dated symbol),
:mod:`~foxhunt_pipeline.ingest.records` (chunks, per-instrument split, ordering),
:mod:`~foxhunt_pipeline.ingest.batches` (the parquet layout),
:mod:`~foxhunt_pipeline.ingest.spill` and :mod:`~foxhunt_pipeline.ingest.background_writer`.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa

from foxhunt_pipeline.basics.atomic import atomic_write
from foxhunt_pipeline.basics.utc import UTC_OFFSET, iso_utc
from foxhunt_pipeline.contracts.schemas import StreamValidator, ValidationResult, raw_bars_schema
from foxhunt_pipeline.ingest.background_writer import BackgroundWriter
from foxhunt_pipeline.ingest.batches import (
    KEY_COLUMNS,
    PARQUET_OPTIONS,
    PRICE_COLUMNS,
    PRICE_SCALE,
    RAW_BARS_ARROW_SCHEMA,
    RAW_BARS_POLARS_SCHEMA,
    STRING_COLUMNS,
    UNDEF_PRICE,
    WRITE_SCHEMA,
    BatchScreen,
    empty_batch,
    raw_bars_batch,
    validation_view,
)
from foxhunt_pipeline.ingest.dbn_file import (
    BAR_SCHEMAS,
    DbnInputError,
    DbnMetadata,
    NsRange,
    StrictDBNStore,
    check_bars,
    check_roots,
    check_rtype,
    metadata_of,
    open_store,
    plausible_ns,
    read_metadata,
    unknown_root_problem,
)
from foxhunt_pipeline.ingest.records import (
    dedupe_sorted,
    iter_chunks,
    split_by_instrument,
    strictly_after,
)
from foxhunt_pipeline.ingest.spill import SpillArea
from foxhunt_pipeline.ingest.symbols import SymbolResolver, spread_ids_from_definitions
from foxhunt_pipeline.instruments.sessions import calendar_name, open_minutes
from foxhunt_pipeline.instruments.specs import ROOTS


@dataclass
class IngestReport(NsRange):
    source: Path
    dest: Path
    rows_in: int = 0
    rows_out: int = 0
    spreads_dropped: int = 0
    unmapped_dropped: int = 0
    duplicates_dropped: int = 0
    conflicting_duplicates: int = 0  # dropped copies whose OHLCV differ from the kept one
    first_conflicts: list[tuple[int, int]] = field(default_factory=list)  # (iid, ts ns)
    undef_price_rows: int = 0
    schema: str = ""
    dataset: str = ""
    dbn_version: int = 0
    start_ns: int = 0
    end_ns: int | None = None
    symbols: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    validation: ValidationResult | None = None  # set by ingest_dbn_file(validate=True)
    last_ns: int | None = None  # the latest record's ts_event (any record)
    roots: set[str] = field(default_factory=set)  # roots of the rows kept
    outside_dropped: int = 0  # unmapped rows that also lie outside the header's range
    first_outside: list[int] = field(default_factory=list)  # their ts_event (ns), first few
    zero_volume: dict[str, int] = field(default_factory=dict)  # root -> bars with volume 0

    def note_unmapped(self, ts: np.ndarray) -> None:
        """Rows dropped for want of a symbol mapping; those outside the header's range are
        counted apart (a 2099 row is a broken record, not a symbology gap)."""
        self.unmapped_dropped += len(ts)
        t = np.asarray(ts, dtype=np.uint64)
        out = (t < np.uint64(self.start_ns)) | (
            (t >= np.uint64(self.end_ns)) if self.end_ns is not None else np.zeros(t.shape, bool))
        if out.any():
            self.outside_dropped += int(out.sum())
            self.first_outside += [int(x) for x in t[out][: max(0, 5 - len(self.first_outside))]]


    def as_metadata(self) -> dict[str, Any]:
        """Flat, JSON-friendly view for Dagster materialization metadata."""
        return {
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "spreads_dropped": self.spreads_dropped,
            "unmapped_dropped": self.unmapped_dropped,
            "duplicates_dropped": self.duplicates_dropped,
            "conflicting_duplicates": self.conflicting_duplicates,
            "undef_price_rows": self.undef_price_rows,
            "schema": self.schema,
            "dataset": self.dataset,
            "dbn_version": self.dbn_version,
            "start": iso_utc(self.start_ns, zone=UTC_OFFSET),
            "end": iso_utc(self.end_ns, zone=UTC_OFFSET) if self.end_ns is not None else None,
            "symbols": ", ".join(self.symbols),
            "warnings": "; ".join(self.warnings),
        }


DEFAULT_SPILL_MEMORY_BYTES = 192 * 2**20
# what this home's tables are built from: one bar size (features, windows, annualisation
# and costs assume one-minute bars) and CME Globex
HOME_BAR_SCHEMAS = ("ohlcv-1m",)
DATASETS = frozenset({"GLBX.MDP3"})
# one row group per chunk and instrument at most: small enough that a decoded chunk, its
# Arrow batches and the writer's queue stay a few tens of MB
DEFAULT_CHUNK_RECORDS = 262_144


def _last_row(batch: pa.RecordBatch, validator: StreamValidator) -> pl.DataFrame:
    """A batch's last row in the contract's layout, for the validator to carry over."""
    frame, consts = validation_view(batch.slice(batch.num_rows - 1, 1))
    return validator.materialise(frame, consts)


class _NeedsSort(Exception):
    """The streamed instrument is not strictly increasing in time: redo with it spilled."""


@dataclass(frozen=True)
class _Options:
    """:func:`ingest_dbn_file`'s settings, as each attempt at the partition reads them."""

    chunk_records: int
    source_file: str
    spread_ids: set[int]
    def_symbols: dict[int, str]
    writer_options: dict[str, Any]
    row_group_rows: int
    validate: bool
    spill_memory_bytes: int
    schemas: tuple[str, ...]
    datasets: Collection[str]
    known_roots: frozenset[str]
    plausible_dates: bool


@dataclass
class _Run:
    """One attempt at writing the partition."""

    report: IngestReport
    resolver: SymbolResolver
    validator: StreamValidator | None
    source_file: str
    row_group_rows: int
    known_roots: Collection[str] = ()
    writer: BackgroundWriter | None = None
    # numpy screen of each batch as it is built (None: every batch screened by polars)
    screen: BatchScreen | None = None
    # the instrument written as it is read (None: all are held and written after the file)
    stream_iid: int | None = None
    streamed_last: int = -1  # its latest ts_event written so far
    keep: dict[int, bool] = field(default_factory=dict)  # instrument -> has rows to keep

    def write(self, tmp: Path, store: StrictDBNStore, opts: _Options, spill: SpillArea) -> None:
        """The partition into ``tmp``: the file read once, the streamed instrument written
        as it comes, the held ones after it; the writer is closed on any failure."""
        self.writer = BackgroundWriter(tmp, WRITE_SCHEMA, **opts.writer_options)
        try:
            self.streamed_last = -1
            for arr in iter_chunks(store, self.report.source, opts.chunk_records):
                self.take_chunk(arr, spill)
            self.write_held(spill)
            if self.report.rows_out == 0:
                self.writer.write(empty_batch())
        except BaseException:
            with contextlib.suppress(BaseException):
                self.writer.close()
            raise
        self.writer.close()

    def take_chunk(self, arr: np.ndarray, spill: SpillArea) -> None:
        """One decoded chunk: each instrument's records dropped (spreads, unmapped),
        written (the streamed one) or held in ``spill``."""
        report = self.report
        report.rows_in += len(arr)
        check_rtype(report.source, report.schema, arr["rtype"])
        last = int(arr["ts_event"].max())
        report.last_ns = last if report.last_ns is None else max(report.last_ns, last)
        for iid, recs in split_by_instrument(arr):
            kept = self.keep.get(iid)
            if kept is None:
                kept = self.keep[iid] = self.resolver.may_keep(iid)
            if not kept:
                if iid in self.resolver.unmapped:
                    report.note_unmapped(recs["ts_event"])
                else:
                    report.spreads_dropped += len(recs)
            elif iid == self.stream_iid:
                if not strictly_after(self.streamed_last, recs["ts_event"]):
                    raise _NeedsSort
                self.streamed_last = int(recs["ts_event"][-1])
                self.emit(iid, recs)
            else:
                spill.add(iid, recs)

    def write_held(self, spill: SpillArea) -> None:
        """The held instruments in id order; one that is not strictly increasing is sorted
        and deduplicated on its own (conflicting copies counted, the first kept)."""
        report = self.report
        for iid in spill.ids():
            if spill.clean[iid]:
                for recs in spill.blocks(iid, self.row_group_rows):
                    self.emit(iid, recs)
                continue
            whole = np.concatenate(list(spill.blocks(iid, self.row_group_rows)))
            recs, conflicts = dedupe_sorted(whole)
            report.duplicates_dropped += len(whole) - len(recs)
            if len(conflicts):
                report.conflicting_duplicates += len(conflicts)
                report.first_conflicts += [(iid, int(t)) for t in conflicts[:5]]
            del whole
            self.emit(iid, recs)

    def emit(self, iid: int, recs: np.ndarray) -> None:
        """Write one instrument's time-sorted records, split by their dated symbol."""
        assert self.writer is not None
        report = self.report
        for lo, hi, symbol, root in self.resolver.segments(iid, recs["ts_event"]):
            if symbol is None:
                if root == "spread":
                    report.spreads_dropped += hi - lo
                else:
                    report.note_unmapped(recs["ts_event"][lo:hi])
                continue
            if root is not None and root not in self.known_roots:
                raise DbnInputError(report.source, f"{symbol}: " + unknown_root_problem([root]))
            if root is not None:
                report.roots.add(root)
                zero = int(np.count_nonzero(recs["volume"][lo:hi] == 0))
                if zero:
                    report.zero_volume[root] = report.zero_volume.get(root, 0) + zero
            for a in range(lo, hi, self.row_group_rows):
                b = min(a + self.row_group_rows, hi)
                batch, n_undef = raw_bars_batch(recs[a:b], symbol, root, self.source_file, self.screen)
                report.undef_price_rows += n_undef
                report.rows_out += b - a
                if self.validator is not None and not (
                    self.screen is not None
                    and self.screen.passed
                    and self.validator.feed_passed(
                        b - a,
                        (iid, int(recs["ts_event"][a])),
                        (iid, int(recs["ts_event"][b - 1])),
                        functools.partial(_last_row, batch, self.validator),
                    )
                ):
                    self.validator.feed(*validation_view(batch))
                self.writer.write(batch)


def ingest_dbn_file(
    src: Path | str,
    dest: Path | str,
    *,
    chunk_records: int = DEFAULT_CHUNK_RECORDS,
    source_file: str | None = None,
    definitions: Sequence[Path | str] = (),
    compression: str = "zstd",
    compression_level: int | None = 1,
    row_group_rows: int = 262_144,
    validate: bool = False,
    spill_memory_bytes: int = DEFAULT_SPILL_MEMORY_BYTES,
    schemas: Sequence[str] = BAR_SCHEMAS,
    datasets: Collection[str] = DATASETS,
    known_roots: Collection[str] = ROOTS.keys(),
    plausible_dates: bool = True,
) -> IngestReport:
    """Decode one landed DBN bar file into one raw_bars parquet file at ``dest``.

    ``source_file`` (default: the file name, which is the Dagster partition key) fills
    the ``source_file`` column. ``definitions``: definition DBN files whose instrument
    class marks spreads (symbol form is used as well). The write is atomic: on any
    failure a previous ``dest`` stays intact and no temporary file is left.

    The output is sorted by instrument, the file by time, so one pass streams the
    lowest-id outright straight to parquet while the others are held (in memory up to
    ``spill_memory_bytes``, then on disk) and written after it. Memory is bounded by
    ``chunk_records`` plus that budget (plus, for an instrument whose records are out of
    order or duplicated, that instrument's records, which are sorted and deduplicated).

    ``validate=True`` checks every batch against :func:`schemas.raw_bars_schema` for the
    file's metadata range as it is written (no second read) and puts the outcome in
    ``report.validation``; the file is written either way.
    """
    src, dest = Path(src), Path(dest)
    spread_ids, def_symbols = spread_ids_from_definitions(definitions) if definitions else (set(), {})
    opts = _Options(
        chunk_records=chunk_records, source_file=source_file or src.name,
        spread_ids=spread_ids, def_symbols=def_symbols,
        writer_options={"compression": compression, "compression_level": compression_level,
                        **PARQUET_OPTIONS},
        row_group_rows=row_group_rows, validate=validate, spill_memory_bytes=spill_memory_bytes,
        schemas=tuple(schemas), datasets=datasets, known_roots=frozenset(known_roots),
        plausible_dates=plausible_dates,
    )
    try:
        return _ingest(src, dest, opts, stream_first=True)
    except _NeedsSort:
        return _ingest(src, dest, opts, stream_first=False)


def _ingest(src: Path, dest: Path, opts: _Options, *, stream_first: bool) -> IngestReport:
    """One attempt: with ``stream_first`` the lowest-id outright is written as it is read
    (raising :class:`_NeedsSort` if it is out of order), otherwise every instrument is held."""
    store = open_store(src)
    meta = metadata_of(src, store)
    check_bars(src, meta, opts.schemas, opts.datasets, opts.plausible_dates)
    check_roots(src, meta, opts.known_roots)
    assert meta.schema is not None
    run = _start(src, dest, meta, opts)
    known = sorted(set(run.resolver.intervals) | set(opts.def_symbols))
    run.stream_iid = next((i for i in known if run.resolver.may_keep(i)), None) if stream_first else None
    dest.parent.mkdir(parents=True, exist_ok=True)
    spill = SpillArea(dest.parent, opts.spill_memory_bytes)
    try:
        atomic_write(dest, lambda tmp: run.write(tmp, store, opts, spill))
    finally:
        spill.close()
    _finish(run)
    return run.report


def _start(src: Path, dest: Path, meta: DbnMetadata, opts: _Options) -> _Run:
    """The attempt's report, symbol resolver and (``validate``) validator and screen for the
    header's range, itself clipped to the plausible one: rows must lie in both."""
    lo, hi = plausible_ns() if opts.plausible_dates else (0, 2**63 - 1)
    start_ns, end_ns = max(meta.start_ns, lo), min(hi if meta.end_ns is None else meta.end_ns, hi)
    report = IngestReport(
        source=src,
        dest=dest,
        schema=meta.schema or "",
        dataset=meta.dataset,
        dbn_version=meta.dbn_version,
        start_ns=meta.start_ns,
        end_ns=meta.end_ns,
        symbols=meta.symbols,
    )
    resolver = SymbolResolver(meta, opts.spread_ids, opts.def_symbols)
    validator = (
        StreamValidator(raw_bars_schema(start_ns, end_ns), label=f"raw_bars ({src.name})")
        if opts.validate
        else None
    )
    run = _Run(report, resolver, validator, opts.source_file, opts.row_group_rows, opts.known_roots)
    if validator is not None:
        run.screen = BatchScreen.for_schema(validator.schema, start_ns, end_ns)
    return run


def _finish(run: _Run) -> None:
    """The validation outcome and the warnings of a written partition, into its report."""
    report, validator, name = run.report, run.validator, run.report.source.name
    if validator is not None:
        if report.rows_out == 0:
            validator.feed(pl.from_arrow(RAW_BARS_ARROW_SCHEMA.empty_table()))  # type: ignore[arg-type]
        report.validation = validator.result()
        zero = sum(report.zero_volume.values())
        if report.validation.passed and report.rows_out and zero == report.rows_out:
            report.validation = ValidationResult(
                False, zero, pl.DataFrame({"check": ["volume > 0"], "column": ["volume"], "row": [0], "value": ["0"]}),
                f"raw_bars ({name}): every one of its {zero} bars has volume 0 (an OHLCV bar exists only "
                "where something traded): not a file of trades; quarantined")
    if report.rows_in == 0:
        report.warnings.append(f"{name}: 0 records; wrote an empty partition")
    report.warnings += zero_volume_warnings(name, report)
    report.warnings += dropped_warnings(name, report, run.resolver.unmapped)
    if (late := truncation_warning(name, report)) is not None:
        report.warnings.append(late)
    if report.conflicting_duplicates:
        first = ", ".join(
            f"instrument {i} at {iso_utc(t, zone=UTC_OFFSET)}"
            for i, t in report.first_conflicts[:5]
        )
        report.warnings.append(
            f"{name}: {report.conflicting_duplicates} duplicate bars (same instrument, "
            f"ts_event and publisher) disagree with the first copy in the file, which is "
            f"kept; first: {first}"
        )
    if report.undef_price_rows:
        report.warnings.append(
            f"{name}: {report.undef_price_rows} rows carry UNDEF_PRICE (null prices)"
        )


def zero_volume_warnings(name: str, report: IngestReport) -> list[str]:
    """Bars with volume 0, per root: named, and kept out of the volume roll
    (``instruments.rolls.daily_volume`` counts traded bars only)."""
    if sum(report.zero_volume.values()) == report.rows_out:
        return []  # a file of nothing else fails its contract instead
    return [f"{name}: {n} {root} bar(s) with volume 0 (an OHLCV bar exists only where something traded): "
            "kept out of the volume roll" for root, n in sorted(report.zero_volume.items())]


def dropped_warnings(name: str, report: IngestReport, unmapped: Collection[int]) -> list[str]:
    """Why rows were dropped: outside the header's date range, or no symbol mapping."""
    out = []
    if report.outside_dropped:
        when = ", ".join(iso_utc(t, zone=UTC_OFFSET) for t in report.first_outside[:3])
        end = iso_utc(report.end_ns, zone=UTC_OFFSET) if report.end_ns is not None else "open end"
        out.append(
            f"{name}: {report.outside_dropped} row(s) dated outside the header's range "
            f"{iso_utc(report.start_ns, zone=UTC_OFFSET)} .. {end} were dropped (first: {when}): a broken record "
            "or a file that was altered after download"
        )
    rest = report.unmapped_dropped - report.outside_dropped
    if rest and unmapped:
        ids = ", ".join(str(i) for i in sorted(unmapped)[:10])
        out.append(
            f"{name}: {rest} row(s) of instrument_id(s) {ids} inside the header's range have no "
            "symbol mapping on their date and were dropped (re-download with the symbols you need)"
        )
    return out


#: a file whose last record precedes its header's end by more open-market time than this
#: looks cut short (a daily file of a liquid root ends within minutes of its end)
TRUNCATION_OPEN_MINUTES = 120.0


def truncation_warning(name: str, report: IngestReport,
                       threshold_minutes: float = TRUNCATION_OPEN_MINUTES) -> str | None:
    """A warning when the records stop while the exchange was open long before the header's
    end: a download or copy cut at a record boundary decodes cleanly as a shorter day."""
    if report.last_ns is None or report.end_ns is None or not report.roots:
        return None
    step = 60 * 10**9 if report.schema == "ohlcv-1m" else 0
    last = pd.Timestamp(report.last_ns + step, unit="ns", tz="UTC")
    end = min(pd.Timestamp(report.end_ns, unit="ns", tz="UTC"), pd.Timestamp.now(tz="UTC"))
    open_for = {r: open_minutes(r, last.to_pydatetime(), end.to_pydatetime()) for r in sorted(report.roots)}
    root = min(open_for, key=lambda r: open_for[r])
    if open_for[root] <= threshold_minutes:
        return None
    return (
        f"{name} looks truncated: its last record is at "
        f"{iso_utc(report.last_ns, zone=UTC_OFFSET)} but its header runs to "
        f"{iso_utc(report.end_ns, zone=UTC_OFFSET)}, and {root} traded "
        f"{open_for[root] / 60:.1f} hours in between ({calendar_name(root)} calendar); "
        f"{report.rows_out} rows ingested. If the download was cut short, land the complete file "
        "(under a new name) and materialize again"
    )


__all__ = [
    "BAR_SCHEMAS",
    "DEFAULT_CHUNK_RECORDS",
    "DATASETS",
    "DEFAULT_SPILL_MEMORY_BYTES",
    "HOME_BAR_SCHEMAS",
    "KEY_COLUMNS",
    "PARQUET_OPTIONS",
    "PRICE_COLUMNS",
    "PRICE_SCALE",
    "RAW_BARS_ARROW_SCHEMA",
    "RAW_BARS_POLARS_SCHEMA",
    "STRING_COLUMNS",
    "UNDEF_PRICE",
    "WRITE_SCHEMA",
    "DbnInputError",
    "DbnMetadata",
    "IngestReport",
    "ingest_dbn_file",
    "read_metadata",
    "spread_ids_from_definitions",
]
