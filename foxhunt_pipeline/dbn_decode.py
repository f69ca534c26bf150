"""Landed DBN bar files -> the ``raw_bars`` parquet contract (docs/contracts.md).

Decoding is ``databento.DBNStore`` (``to_ndarray(count=...)``, over Arrow's zstd stream,
which detects a truncated file), never a hand-written parser. One pass, bounded memory:
the output is sorted by instrument and the file by time, so the lowest-id outright is
streamed straight to parquet while the others are held per instrument (in memory up to
a budget, then on disk) and written after it. Records already strictly increasing are
never sorted; an instrument that is not is sorted and deduplicated on its own. Parquet
is encoded on a writer thread; validation screens each batch with one vectorised pass
and leaves pandera for batches that may fail (see :mod:`foxhunt_pipeline.schemas`).

The landed file is only ever opened for reading.
"""

from __future__ import annotations

import contextlib
import os
import queue
import tempfile
import threading
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import databento_dbn
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard
from databento.common.error import BentoError, BentoWarning

from foxhunt_pipeline.dbn_open import (
    BAR_SCHEMAS,
    DbnInputError,
    DbnMetadata,
    _check_bars,
    _metadata_of,
    _open_store,
    _StrictDBNStore,
    read_metadata,
)
from foxhunt_pipeline.dbn_symbols import _Resolver, spread_ids_from_definitions
from foxhunt_pipeline.schemas import StreamValidator, ValidationResult, raw_bars_schema
from foxhunt_pipeline.warehouse import atomic_write

UNDEF_PRICE = databento_dbn.UNDEF_PRICE
PRICE_SCALE = 1e9
PRICE_COLUMNS = ("open", "high", "low", "close")
KEY_COLUMNS = ("instrument_id", "ts_event", "publisher_id")

RAW_BARS_ARROW_SCHEMA = pa.schema(
    [
        ("ts_event", pa.timestamp("ns", tz="UTC")),
        ("rtype", pa.uint8()),
        ("publisher_id", pa.uint16()),
        ("instrument_id", pa.uint32()),
        ("symbol", pa.string()),
        ("root", pa.string()),
        ("open", pa.float64()),
        ("high", pa.float64()),
        ("low", pa.float64()),
        ("close", pa.float64()),
        ("volume", pa.uint64()),
        ("source_file", pa.string()),
    ]
)
RAW_BARS_POLARS_SCHEMA: dict[str, pl.DataType] = dict(
    pl.from_arrow(RAW_BARS_ARROW_SCHEMA.empty_table()).schema  # type: ignore[union-attr]
)


@dataclass
class IngestReport:
    source: Path
    dest: Path
    rows_in: int = 0
    rows_out: int = 0
    spreads_dropped: int = 0
    unmapped_dropped: int = 0
    duplicates_dropped: int = 0
    undef_price_rows: int = 0
    schema: str = ""
    dataset: str = ""
    dbn_version: int = 0
    start_ns: int = 0
    end_ns: int | None = None
    symbols: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    validation: ValidationResult | None = None  # set by ingest_dbn_file(validate=True)

    @property
    def start(self) -> pd.Timestamp:
        """Metadata start, ns-exact (a ``datetime`` subclass)."""
        return pd.Timestamp(self.start_ns, unit="ns", tz="UTC")

    @property
    def end(self) -> pd.Timestamp | None:
        return None if self.end_ns is None else pd.Timestamp(self.end_ns, unit="ns", tz="UTC")

    def as_metadata(self) -> dict[str, Any]:
        """Flat, JSON-friendly view for Dagster materialization metadata."""
        return {
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "spreads_dropped": self.spreads_dropped,
            "unmapped_dropped": self.unmapped_dropped,
            "duplicates_dropped": self.duplicates_dropped,
            "undef_price_rows": self.undef_price_rows,
            "schema": self.schema,
            "dataset": self.dataset,
            "dbn_version": self.dbn_version,
            "start": self.start.isoformat(),
            "end": self.end.isoformat() if self.end else None,
            "symbols": ", ".join(self.symbols),
            "warnings": "; ".join(self.warnings),
        }


# ---------------------------------------------------------------------------- zstd


def _split_by_instrument(arr: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(instrument_id, its records in file order) for each instrument in a chunk."""
    ids = arr["instrument_id"]
    first = ids[0]
    if (ids == first).all():
        yield int(first), arr
        return
    # gather whole records as rows of 8-byte words: a plain block copy, several times
    # faster than numpy's per-field copy of a structured array
    words = arr.dtype.itemsize // 8 if arr.dtype.itemsize % 8 == 0 else 0
    flat = np.ascontiguousarray(arr).view(np.uint64).reshape(len(arr), words) if words else None

    def take(sel: np.ndarray) -> np.ndarray:
        return flat[sel].reshape(-1).view(arr.dtype) if flat is not None else arr[sel]

    uniq = pl.Series(ids).unique().sort().to_numpy()
    if len(uniq) <= 8:  # a few outrights: one comparison pass per instrument beats a sort
        for iid in uniq:
            yield int(iid), take(ids == iid)
        return
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    cuts = np.flatnonzero(sorted_ids[1:] != sorted_ids[:-1]) + 1
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(ids)], strict=True):
        yield int(sorted_ids[lo]), take(order[lo:hi])


def _dedupe_sorted(recs: np.ndarray) -> np.ndarray:
    """Sort one instrument's records by (ts_event, publisher_id), keep each key's first."""
    order = np.lexsort((recs["publisher_id"], recs["ts_event"]))  # stable
    recs = recs[order]
    if len(recs) < 2:
        return recs
    same = (recs["ts_event"][1:] == recs["ts_event"][:-1]) & (
        recs["publisher_id"][1:] == recs["publisher_id"][:-1]
    )
    return recs[np.r_[True, ~same]]


def _const_dict(value: str | None, n: int) -> pa.DictionaryArray:
    """A string column of one repeated value as a one-entry dictionary (no per-row strings;
    the parquet writer stores it as a dictionary page plus run-length indices)."""
    if value is None:
        return pa.DictionaryArray.from_arrays(pa.nulls(n, pa.int32()), pa.array([], pa.string()))
    return pa.DictionaryArray.from_arrays(np.zeros(n, dtype=np.int32), pa.array([value]))


def _batch(
    recs: np.ndarray, symbol: str, root: str | None, source_file: str
) -> tuple[pa.RecordBatch, int]:
    """Batch in the on-disk raw_bars layout (:data:`WRITE_SCHEMA`); also the number of rows
    with an UNDEF price. Fixed-point prices become float64, UNDEF_PRICE becomes null."""
    n = len(recs)
    cols: list[pa.Array] = [
        pa.array(recs["ts_event"].view(np.int64), pa.int64()).view(pa.timestamp("ns", tz="UTC")),
        pa.array(np.ascontiguousarray(recs["rtype"]), pa.uint8()),
        pa.array(np.ascontiguousarray(recs["publisher_id"]), pa.uint16()),
        pa.array(np.ascontiguousarray(recs["instrument_id"]), pa.uint32()),
        _const_dict(symbol, n),
        _const_dict(root, n),
    ]
    any_undef: np.ndarray | None = None
    for c in PRICE_COLUMNS:
        raw = recs[c]
        undef = raw == UNDEF_PRICE
        px = raw / PRICE_SCALE
        if undef.any():
            any_undef = undef if any_undef is None else any_undef | undef
            cols.append(pa.array(px, pa.float64(), mask=undef))
        else:
            cols.append(pa.array(px, pa.float64()))
    cols.append(pa.array(np.ascontiguousarray(recs["volume"]), pa.uint64()))
    cols.append(_const_dict(source_file, n))
    n_undef = 0 if any_undef is None else int(any_undef.sum())
    return pa.RecordBatch.from_arrays(cols, schema=WRITE_SCHEMA), n_undef


STRING_COLUMNS = ("symbol", "root", "source_file")


def _validation_view(batch: pa.RecordBatch) -> tuple[pl.DataFrame, dict[str, str | None]]:
    """The batch for :class:`StreamValidator`: numeric columns as a zero-copy polars frame,
    the one-value string columns as constants (never built row by row unless the batch
    fails the screen; a polars Categorical would fail the contract's String dtype)."""
    numeric = [n for n in RAW_BARS_ARROW_SCHEMA.names if n not in STRING_COLUMNS]
    frame = pl.from_arrow(pa.Table.from_batches([batch.select(numeric)]))
    assert isinstance(frame, pl.DataFrame)
    consts: dict[str, str | None] = {}
    for n in STRING_COLUMNS:
        col = batch.column(n)
        consts[n] = (
            col.dictionary[0].as_py() if len(col.dictionary) and col.null_count == 0 else None
        )
    return frame, consts


def _iter_chunks(store: _StrictDBNStore, src: Path, chunk_records: int) -> Iterator[np.ndarray]:
    """Chunks of records; a truncated or corrupt stream is a DbnInputError, not a warning."""
    try:
        chunks = iter(store.to_ndarray(count=chunk_records))
        while True:
            with warnings.catch_warnings():
                warnings.simplefilter("error", BentoWarning)
                arr = next(chunks, None)
            if arr is None:
                return
            if len(arr):
                yield arr
    except BentoWarning as exc:
        raise DbnInputError(src, f"truncated DBN data ({exc})") from exc
    except zstandard.ZstdError as exc:
        raise DbnInputError(src, f"corrupt zstd data ({exc})") from exc
    except (BentoError, databento_dbn.DBNError) as exc:
        raise DbnInputError(src, f"corrupt DBN records ({exc})") from exc


def _strictly_after(last_ts: int, ts: np.ndarray) -> bool:
    """``ts`` strictly increasing and after ``last_ts``: sorted and duplicate-free."""
    return int(ts[0]) > last_ts and (len(ts) < 2 or bool((ts[1:] > ts[:-1]).all()))


class _SpillArea:
    """Each spilled instrument's records, in file order: in memory while the area holds less
    than ``budget_bytes``, in one raw file per instrument (a temporary directory beside the
    destination) from then on. Memory stays bounded; files that fit never touch the disk."""

    def __init__(self, parent: Path, budget_bytes: int) -> None:
        self._parent = parent
        self.budget_bytes = budget_bytes
        self.mem_bytes = 0
        self._mem: dict[int, list[np.ndarray]] = {}
        self._fhs: dict[int, Any] = {}
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self.clean: dict[int, bool] = {}
        self._last: dict[int, int] = {}
        self.dtype: np.dtype | None = None

    def add(self, iid: int, recs: np.ndarray) -> None:
        self.dtype = recs.dtype
        ts = recs["ts_event"]
        last = self._last.get(iid, -1)
        if self.clean.get(iid, True) and not _strictly_after(last, ts):
            self.clean[iid] = False
        else:
            self.clean.setdefault(iid, True)
        self._last[iid] = max(last, int(ts.max()))
        self._mem.setdefault(iid, [])
        if self._dir is None and self.mem_bytes + recs.nbytes <= self.budget_bytes:
            self._mem[iid].append(recs)
            self.mem_bytes += recs.nbytes
            return
        if self._dir is None:  # over budget: from now on every block goes to disk
            self._dir = tempfile.TemporaryDirectory(dir=self._parent, prefix=".ingest-")
        fh = self._fhs.get(iid)
        if fh is None:
            fh = self._fhs[iid] = open(Path(self._dir.name) / f"{iid}.rec", "wb")  # noqa: SIM115
        recs.tofile(fh)

    def ids(self) -> list[int]:
        return sorted(self._mem)

    def blocks(self, iid: int, block: int) -> Iterator[np.ndarray]:
        """The instrument's records in file order (memory first, then its file), released as
        they are handed out."""
        mem = self._mem.pop(iid, [])
        while mem:
            recs = mem.pop(0)
            self.mem_bytes -= recs.nbytes
            yield recs
        fh = self._fhs.pop(iid, None)
        if fh is not None:
            fh.close()
            assert self.dtype is not None
            with open(fh.name, "rb") as rf:
                while len(recs := np.fromfile(rf, dtype=self.dtype, count=block)):
                    yield recs
            os.unlink(fh.name)

    def close(self) -> None:
        for fh in self._fhs.values():
            fh.close()
        self._fhs.clear()
        self._mem.clear()
        if self._dir is not None:
            self._dir.cleanup()


class _BackgroundWriter:
    """A ``ParquetWriter`` fed through a short queue by one thread: Arrow encodes and
    compresses a row group with the GIL released while the caller decodes the next chunk.
    The first write error stops writing and is raised to the caller."""

    _STOP = object()

    def __init__(self, path: Path, schema: pa.Schema, **options: Any) -> None:
        self._writer = pq.ParquetWriter(path, schema, **options)
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=4)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="raw-bars-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (item := self._queue.get()) is not self._STOP:
            if self._error is None:
                try:
                    self._writer.write_batch(item)
                except BaseException as exc:  # handed to the caller
                    self._error = exc

    def write(self, batch: pa.RecordBatch) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(batch)

    def close(self) -> None:
        """Flush and close; raises the writer thread's error, if any."""
        self._queue.put(self._STOP)
        self._thread.join()
        self._writer.close()
        if self._error is not None:
            raise self._error


WRITE_SCHEMA = pa.schema(
    [
        pa.field(f.name, pa.dictionary(pa.int32(), pa.string()))
        if f.name in ("symbol", "root", "source_file")
        else f
        for f in RAW_BARS_ARROW_SCHEMA
    ]
)

PARQUET_OPTIONS: dict[str, Any] = {
    # dictionary pages for the one-value string columns only; small ints and prices
    # compress to nothing under zstd anyway, and hashing them costs time
    "use_dictionary": ["symbol", "root", "source_file"],
    # bar times step by a fixed interval and volumes are small: delta bit-packing stores
    # them in a few bits each, cheaper to encode than zstd on 8-byte words
    "column_encoding": {"ts_event": "DELTA_BINARY_PACKED", "volume": "DELTA_BINARY_PACKED"},
    "write_statistics": ["ts_event", "instrument_id", "publisher_id"],
    # readers derive the schema from parquet's own types (timestamp[ns, UTC], uint*, string),
    # so the dictionary-encoded write layout is not imposed on them
    "store_schema": False,
}

DEFAULT_SPILL_MEMORY_BYTES = 192 * 2**20
# one row group per chunk and instrument at most: small enough that a decoded chunk, its
# Arrow batches and the writer's queue stay a few tens of MB
DEFAULT_CHUNK_RECORDS = 262_144


class _NeedsSort(Exception):
    """The streamed instrument is not strictly increasing in time: redo with it spilled."""


@dataclass
class _Run:
    """One attempt at writing the partition."""

    report: IngestReport
    resolver: _Resolver
    validator: StreamValidator | None
    source_file: str
    row_group_rows: int
    writer: _BackgroundWriter | None = None

    def emit(self, iid: int, recs: np.ndarray) -> None:
        """Write one instrument's time-sorted records, split by their dated symbol."""
        assert self.writer is not None
        report = self.report
        for lo, hi, symbol, root in self.resolver.segments(iid, recs["ts_event"]):
            if symbol is None:
                if root == "spread":
                    report.spreads_dropped += hi - lo
                else:
                    report.unmapped_dropped += hi - lo
                continue
            for a in range(lo, hi, self.row_group_rows):
                b = min(a + self.row_group_rows, hi)
                batch, n_undef = _batch(recs[a:b], symbol, root, self.source_file)
                report.undef_price_rows += n_undef
                report.rows_out += b - a
                if self.validator is not None:
                    self.validator.feed(*_validation_view(batch))
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
    spread_ids, def_symbols = (
        spread_ids_from_definitions(definitions) if definitions else (set(), {})
    )
    options = dict(
        chunk_records=chunk_records,
        source_file=source_file or src.name,
        spread_ids=spread_ids,
        def_symbols=def_symbols,
        writer_options={
            "compression": compression,
            "compression_level": compression_level,
            **PARQUET_OPTIONS,
        },
        row_group_rows=row_group_rows,
        validate=validate,
        spill_memory_bytes=spill_memory_bytes,
    )
    try:
        return _ingest(src, dest, stream_first=True, **options)  # type: ignore[arg-type]
    except _NeedsSort:
        return _ingest(src, dest, stream_first=False, **options)  # type: ignore[arg-type]


def _ingest(
    src: Path,
    dest: Path,
    *,
    stream_first: bool,
    chunk_records: int,
    source_file: str,
    spread_ids: set[int],
    def_symbols: dict[int, str],
    writer_options: dict[str, Any],
    row_group_rows: int,
    validate: bool,
    spill_memory_bytes: int,
) -> IngestReport:
    store = _open_store(src)
    meta = _metadata_of(src, store)
    _check_bars(src, meta)
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
    resolver = _Resolver(meta, spread_ids, def_symbols)
    validator = (
        StreamValidator(raw_bars_schema(meta.start_ns, meta.end_ns), label=f"raw_bars ({src.name})")
        if validate
        else None
    )
    run = _Run(report, resolver, validator, source_file, row_group_rows)
    keep: dict[int, bool] = {}
    known = sorted(set(resolver.intervals) | set(def_symbols))
    stream_iid = next((i for i in known if resolver.may_keep(i)), None) if stream_first else None
    dest.parent.mkdir(parents=True, exist_ok=True)
    spill = _SpillArea(dest.parent, spill_memory_bytes)

    def write(tmp: Path) -> None:
        run.writer = _BackgroundWriter(tmp, WRITE_SCHEMA, **writer_options)
        try:
            streamed_last = -1
            for arr in _iter_chunks(store, src, chunk_records):
                report.rows_in += len(arr)
                for iid, recs in _split_by_instrument(arr):
                    kept = keep.get(iid)
                    if kept is None:
                        kept = keep[iid] = resolver.may_keep(iid)
                    if not kept:
                        if iid in resolver.unmapped:
                            report.unmapped_dropped += len(recs)
                        else:
                            report.spreads_dropped += len(recs)
                    elif iid == stream_iid:
                        if not _strictly_after(streamed_last, recs["ts_event"]):
                            raise _NeedsSort
                        streamed_last = int(recs["ts_event"][-1])
                        run.emit(iid, recs)
                    else:
                        spill.add(iid, recs)
            for iid in spill.ids():
                if spill.clean[iid]:
                    for recs in spill.blocks(iid, row_group_rows):
                        run.emit(iid, recs)
                    continue
                whole = np.concatenate(list(spill.blocks(iid, row_group_rows)))
                recs = _dedupe_sorted(whole)
                report.duplicates_dropped += len(whole) - len(recs)
                del whole
                run.emit(iid, recs)
            if report.rows_out == 0:
                run.writer.write(_empty_batch())
        except BaseException:
            with contextlib.suppress(BaseException):
                run.writer.close()
            raise
        run.writer.close()

    try:
        atomic_write(dest, write)
    finally:
        spill.close()

    if validator is not None:
        if report.rows_out == 0:
            validator.feed(pl.from_arrow(RAW_BARS_ARROW_SCHEMA.empty_table()))  # type: ignore[arg-type]
        report.validation = validator.result()
    if report.rows_in == 0:
        report.warnings.append(f"{src.name}: 0 records; wrote an empty partition")
    if resolver.unmapped and report.unmapped_dropped:
        ids = ", ".join(str(i) for i in sorted(resolver.unmapped)[:10])
        report.warnings.append(
            f"{src.name}: {report.unmapped_dropped} rows of instrument_id(s) {ids} have no "
            "symbol mapping on their date and were dropped"
        )
    if report.undef_price_rows:
        report.warnings.append(
            f"{src.name}: {report.undef_price_rows} rows carry UNDEF_PRICE (null prices)"
        )
    return report


def _empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=WRITE_SCHEMA)


__all__ = [
    "BAR_SCHEMAS",
    "DEFAULT_CHUNK_RECORDS",
    "DEFAULT_SPILL_MEMORY_BYTES",
    "RAW_BARS_ARROW_SCHEMA",
    "RAW_BARS_POLARS_SCHEMA",
    "WRITE_SCHEMA",
    "DbnInputError",
    "DbnMetadata",
    "IngestReport",
    "ingest_dbn_file",
    "read_metadata",
    "spread_ids_from_definitions",
]
