"""Landed DBN bar files -> the ``raw_bars`` parquet contract (docs/contracts.md).

Decoding is ``databento.DBNStore`` (``to_ndarray(count=...)``), never a hand-written
parser. Memory stays bounded on multi-million-record files: chunks are cleaned one at
a time and spilled per instrument to Arrow IPC files, then concatenated in
instrument order into one parquet file. DBN bar files are time-ordered, so each
instrument's spill is already sorted; only an instrument whose timestamps are not
strictly increasing is loaded on its own to be sorted and deduplicated.

The landed file is only ever opened for reading.
"""

from __future__ import annotations

import io
import tempfile
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import IO, Any

import databento as db
import databento_dbn
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import zstandard
from databento.common.error import BentoError, BentoWarning
from databento_dbn import Compression

from foxhunt_pipeline.instruments import is_spread, parse_outright
from foxhunt_pipeline.warehouse import atomic_write

UNDEF_PRICE = databento_dbn.UNDEF_PRICE
UNDEF_TIMESTAMP = databento_dbn.UNDEF_TIMESTAMP
PRICE_SCALE = 1e9
NS_PER_DAY = 86_400 * 10**9
BAR_SCHEMAS = ("ohlcv-1s", "ohlcv-1m", "ohlcv-1h", "ohlcv-1d", "ohlcv-eod")
PRICE_COLUMNS = ("open", "high", "low", "close")
KEY_COLUMNS = ("instrument_id", "ts_event", "publisher_id")
SPREAD_CLASSES = frozenset({"S", "M", "T"})  # future, mixed and option spreads

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


class DbnInputError(ValueError):
    """A landed file that cannot become raw_bars; the message names the file and why."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{self.path.name}: {problem} (file: {self.path})")


@dataclass(frozen=True)
class DbnMetadata:
    path: Path
    dataset: str
    schema: str | None
    dbn_version: int
    stype_in: str | None
    stype_out: str
    start_ns: int
    end_ns: int | None
    symbols: list[str]
    mappings: dict[str, list[dict[str, Any]]]
    compressed: bool

    @property
    def start(self) -> pd.Timestamp:
        """Metadata start, ns-exact (a ``datetime`` subclass)."""
        return pd.Timestamp(self.start_ns, unit="ns", tz="UTC")

    @property
    def end(self) -> pd.Timestamp | None:
        return None if self.end_ns is None else pd.Timestamp(self.end_ns, unit="ns", tz="UTC")


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


class _CheckedZstdReader(io.RawIOBase):
    """Multi-frame zstd reader that raises on a truncated final frame.

    The reader ``DBNStore`` uses stops silently when a frame is cut short, which would
    turn a half-copied file into a silently shorter partition.
    """

    READ_SIZE = 1 << 18

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fh = open(path, "rb")  # noqa: SIM115 - closed in close()
        self._dctx = zstandard.ZstdDecompressor()
        self._obj = self._dctx.decompressobj()
        self._in_frame = False
        self._buf = bytearray()
        self._done = False
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = offset if whence == io.SEEK_SET else self._pos + offset
        if whence not in (io.SEEK_SET, io.SEEK_CUR) or target < self._pos:
            raise io.UnsupportedOperation("forward seeks only")
        while self._pos < target:
            if not self.read(min(target - self._pos, 1 << 20)):
                break
        return self._pos

    def _fill(self, want: int) -> None:
        while len(self._buf) < want and not self._done:
            chunk = self._fh.read(self.READ_SIZE)
            if not chunk:
                self._done = True
                if self._in_frame:
                    raise DbnInputError(
                        self._path, "truncated zstd stream (last frame is incomplete)"
                    )
                break
            data = chunk
            while data:
                self._in_frame = True
                self._buf += self._obj.decompress(data)
                if not self._obj.eof:
                    break
                data = self._obj.unused_data
                self._obj = self._dctx.decompressobj()
                self._in_frame = False

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            self._fill(1 << 62)
            size = len(self._buf)
        else:
            self._fill(size)
        out = bytes(self._buf[:size])
        del self._buf[:size]
        self._pos += len(out)
        return out

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._fh.close()
        super().close()


class _StrictDBNStore(db.DBNStore):
    """``DBNStore`` whose record reader detects truncated zstd frames."""

    source_path: Path

    @property
    def reader(self) -> IO[bytes]:
        if self.compression == Compression.ZSTD:
            return _CheckedZstdReader(self.source_path)  # type: ignore[return-value]
        return super().reader


# ------------------------------------------------------------------------ opening


def _diagnose(path: Path, exc: BaseException) -> DbnInputError:
    """Turn a decoder failure into a message that says what the file actually is."""
    with open(path, "rb") as fh:
        head = fh.read(64)
    if not head:
        return DbnInputError(path, "empty file (0 bytes); not a DBN file")
    magic = int.from_bytes(head[:4], "little")
    if 0x184D2A50 <= magic <= 0x184D2A5F or head[:3] == b"DBZ" or b"DBZ" in head[8:16]:
        return DbnInputError(path, "legacy DBZ format (pre-DBN); re-download it as DBN")
    if isinstance(exc, zstandard.ZstdError):
        return DbnInputError(path, f"corrupt zstd data ({exc})")
    if head[:4] == zstandard.FRAME_HEADER:
        try:
            start = _CheckedZstdReader(path).read(3)
        except DbnInputError as e:
            return e
        except zstandard.ZstdError as e:
            return DbnInputError(path, f"corrupt zstd data ({e})")
        if start != b"DBN":
            return DbnInputError(
                path,
                "zstd data has no DBN metadata header (a header-less .frag record fragment, "
                "or not a DBN file)",
            )
        return DbnInputError(path, f"corrupt DBN metadata header ({exc})")
    if head[:3] == b"DBN":
        return DbnInputError(path, f"corrupt DBN data ({exc})")
    return DbnInputError(
        path,
        "not a DBN file: neither a DBN header nor zstd (a header-less .frag record "
        "fragment, or another format)",
    )


def _open_store(src: Path) -> _StrictDBNStore:
    src = Path(src)
    if not src.is_file():
        raise DbnInputError(src, "no such file")
    if src.stat().st_size == 0:
        raise DbnInputError(src, "empty file (0 bytes); not a DBN file")
    try:
        store = _StrictDBNStore.from_file(src)
    except (BentoError, databento_dbn.DBNError, zstandard.ZstdError, ValueError) as exc:
        raise _diagnose(src, exc) from exc
    store.source_path = src
    return store


def _metadata_of(src: Path, store: db.DBNStore) -> DbnMetadata:
    m = store.metadata
    end = m.end
    return DbnMetadata(
        path=Path(src),
        dataset=m.dataset,
        schema=str(m.schema) if m.schema else None,
        dbn_version=m.version,
        stype_in=None if m.stype_in is None else str(m.stype_in),
        stype_out=str(m.stype_out),
        start_ns=int(m.start),
        end_ns=None if end is None or end == UNDEF_TIMESTAMP else int(end),
        symbols=list(m.symbols),
        mappings={k: [dict(iv) for iv in v] for k, v in m.mappings.items()},
        compressed=store.compression == Compression.ZSTD,
    )


def read_metadata(src: Path | str) -> DbnMetadata:
    """Header of a landed DBN file, without reading its records."""
    src = Path(src)
    return _metadata_of(src, _open_store(src))


# ------------------------------------------------------------------ symbology


@dataclass(frozen=True)
class _Interval:
    start_day: int  # days since epoch, inclusive
    end_day: int  # exclusive
    symbol: str


def _symbol_intervals(meta: DbnMetadata) -> dict[int, list[_Interval]]:
    """instrument_id -> dated raw-symbol intervals, from the header's mappings.

    With ``stype_in=parent`` the mappings are keyed by the child contracts
    (``ESH4``, ``ESH4-ESM4``); with ``raw_symbol`` by the requested symbol; either way
    the interval's symbol is the instrument_id (``stype_out=instrument_id``).
    """
    epoch = date(1970, 1, 1)
    out: dict[int, list[_Interval]] = {}
    for key, intervals in meta.mappings.items():
        for iv in intervals:
            if not iv.get("symbol"):
                continue
            if meta.stype_out == "instrument_id":
                raw, iid = key, iv["symbol"]
            elif meta.stype_in == "instrument_id":
                raw, iid = iv["symbol"], key
            else:
                continue
            try:
                instrument_id = int(iid)
            except ValueError:
                continue
            out.setdefault(instrument_id, []).append(
                _Interval((iv["start_date"] - epoch).days, (iv["end_date"] - epoch).days, raw)
            )
    for ivs in out.values():
        ivs.sort(key=lambda i: i.start_day)
    return out


def _parent_root(meta: DbnMetadata) -> str | None:
    roots = {s.split(".")[0] for s in meta.symbols if s.endswith(".FUT")}
    return roots.pop() if len(roots) == 1 else None


def _root_of(symbol: str, day: int, parent_root: str | None) -> str | None:
    parsed = parse_outright(symbol, date(1970, 1, 1) + timedelta(days=day))
    if parsed is not None:
        return parsed[0]
    return parent_root


def spread_ids_from_definitions(paths: Iterable[Path | str]) -> tuple[set[int], dict[int, str]]:
    """(spread instrument_ids, instrument_id -> raw_symbol) from definition DBN files."""
    spreads: set[int] = set()
    symbols: dict[int, str] = {}
    for p in paths:
        store = _open_store(Path(p))
        if store.metadata.schema != "definition":
            raise DbnInputError(
                p, f"expected a definition file, got schema {store.metadata.schema!r}"
            )
        for rec in store:
            if not isinstance(rec, databento_dbn.InstrumentDefMsg):
                continue
            cls = getattr(rec.instrument_class, "value", str(rec.instrument_class))
            symbols[rec.instrument_id] = rec.raw_symbol
            if cls in SPREAD_CLASSES or is_spread(rec.raw_symbol):
                spreads.add(rec.instrument_id)
    return spreads, symbols


# -------------------------------------------------------------------- cleaning


@dataclass
class _Spill:
    path: Path
    writer: ipc.RecordBatchStreamWriter
    sink: Any
    last_ts: int = -1
    clean: bool = True  # strictly increasing ts_event so far
    rows: int = 0


class _ChunkCleaner:
    """Per-chunk work: symbols, roots, outright filter, price and time conversion."""

    def __init__(
        self,
        meta: DbnMetadata,
        source_file: str,
        spread_ids: set[int],
        def_symbols: dict[int, str],
        report: IngestReport,
    ) -> None:
        self.intervals = _symbol_intervals(meta)
        self.parent_root = _parent_root(meta)
        self.source_file = source_file
        self.spread_ids = spread_ids
        self.def_symbols = def_symbols
        self.report = report
        self._resolved: dict[tuple[int, int], tuple[str | None, str | None, bool]] = {}
        self.unmapped: set[int] = set()

    def _resolve(self, iid: int, day: int) -> tuple[str | None, str | None, bool]:
        """(symbol, root, keep) for one instrument on one UTC day, memoised."""
        key = (iid, day)
        hit = self._resolved.get(key)
        if hit is not None:
            return hit
        symbol = None
        for iv in self.intervals.get(iid, ()):
            if iv.start_day <= day < iv.end_day:
                symbol = iv.symbol
                break
        if symbol is None:
            symbol = self.def_symbols.get(iid)
        if symbol is None:
            out: tuple[str | None, str | None, bool] = (None, None, False)
        elif iid in self.spread_ids or is_spread(symbol):
            out = (symbol, None, False)
        else:
            out = (symbol, _root_of(symbol, day, self.parent_root), True)
        self._resolved[key] = out
        return out

    def clean(self, arr: np.ndarray) -> pl.DataFrame:
        n = len(arr)
        self.report.rows_in += n
        ts = arr["ts_event"].astype(np.int64)
        iid = arr["instrument_id"]
        day = (ts // NS_PER_DAY).astype(np.int32)
        frame = pl.DataFrame(
            {
                "ts_event": ts,
                "rtype": arr["rtype"],
                "publisher_id": arr["publisher_id"],
                "instrument_id": iid,
                "day": day,
                **{c: arr[c] for c in PRICE_COLUMNS},
                "volume": arr["volume"],
            }
        )
        pairs = frame.select("instrument_id", "day").unique()
        lookup_rows = []
        for i, d in pairs.iter_rows():
            symbol, root, keep = self._resolve(i, d)
            lookup_rows.append((i, d, symbol, root, keep))
            if symbol is None:
                self.unmapped.add(i)
        lookup = pl.DataFrame(
            lookup_rows,
            schema={
                "instrument_id": pl.UInt32,
                "day": pl.Int32,
                "symbol": pl.String,
                "root": pl.String,
                "keep": pl.Boolean,
            },
            orient="row",
        )
        frame = frame.join(lookup, on=["instrument_id", "day"], how="left", maintain_order="left")
        keep = frame["keep"]
        n_keep = int(keep.sum())
        n_unmapped = int(frame["symbol"].is_null().sum())
        self.report.unmapped_dropped += n_unmapped
        self.report.spreads_dropped += n - n_keep - n_unmapped
        if n_keep < n:
            frame = frame.filter(keep)
        undef = pl.any_horizontal([pl.col(c) == UNDEF_PRICE for c in PRICE_COLUMNS])
        prices = [
            pl.when(pl.col(c) == UNDEF_PRICE)
            .then(None)
            .otherwise(pl.col(c).cast(pl.Float64) / PRICE_SCALE)
            .alias(c)
            for c in PRICE_COLUMNS
        ]
        self.report.undef_price_rows += int(frame.select(undef.sum()).item())
        return frame.select(
            pl.col("ts_event").cast(pl.Datetime("ns", "UTC")),
            "rtype",
            "publisher_id",
            "instrument_id",
            "symbol",
            "root",
            *prices,
            "volume",
            pl.lit(self.source_file, pl.String).alias("source_file"),
        )


def _to_arrow(frame: pl.DataFrame) -> pa.Table:
    return frame.to_arrow().cast(RAW_BARS_ARROW_SCHEMA)


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


def _check_bars(src: Path, meta: DbnMetadata) -> None:
    if meta.schema is None:
        raise DbnInputError(src, "mixed-schema DBN stream; raw_bars needs one ohlcv schema")
    if meta.schema not in BAR_SCHEMAS:
        raise DbnInputError(
            src,
            f"DBN schema {meta.schema!r} is not a bar schema; raw_bars accepts "
            f"{', '.join(BAR_SCHEMAS)}",
        )


def _write_instrument(spill: _Spill, writer: pq.ParquetWriter, report: IngestReport) -> None:
    with pa.OSFile(str(spill.path), "rb") as fh:
        reader = ipc.open_stream(fh)
        if spill.clean:
            for batch in reader:
                writer.write_batch(batch)
            return
        table = reader.read_all()
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    deduped = frame.sort(["ts_event", "publisher_id"], maintain_order=True).unique(
        subset=list(KEY_COLUMNS), keep="first", maintain_order=True
    )
    report.duplicates_dropped += frame.height - deduped.height
    writer.write_table(_to_arrow(deduped))


def ingest_dbn_file(
    src: Path | str,
    dest: Path | str,
    *,
    chunk_records: int = 1_000_000,
    source_file: str | None = None,
    definitions: Sequence[Path | str] = (),
    compression: str = "zstd",
) -> IngestReport:
    """Decode one landed DBN bar file into one raw_bars parquet file at ``dest``.

    ``source_file`` (default: the file name, which is the Dagster partition key) fills
    the ``source_file`` column. ``definitions``: definition DBN files whose instrument
    class marks spreads (symbol form is used as well). The write is atomic: on any
    failure a previous ``dest`` stays intact and no temporary file is left.
    """
    src, dest = Path(src), Path(dest)
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
    spread_ids, def_symbols = (
        spread_ids_from_definitions(definitions) if definitions else (set(), {})
    )
    cleaner = _ChunkCleaner(meta, source_file or src.name, spread_ids, def_symbols, report)
    dest.parent.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".ingest-") as spill_dir:
        spills: dict[int, _Spill] = {}
        try:
            for arr in _iter_chunks(store, src, chunk_records):
                frame = cleaner.clean(arr)
                if frame.height == 0:
                    continue
                for part in frame.partition_by("instrument_id", maintain_order=True):
                    _spill(spills, Path(spill_dir), part)
            for s in spills.values():
                s.writer.close()
                s.sink.close()

            def write(tmp: Path) -> None:
                with pq.ParquetWriter(tmp, RAW_BARS_ARROW_SCHEMA, compression=compression) as w:
                    for iid in sorted(spills):
                        _write_instrument(spills[iid], w, report)
                    if not spills:
                        w.write_table(RAW_BARS_ARROW_SCHEMA.empty_table())

            atomic_write(dest, write)
        finally:
            for s in spills.values():
                if not s.sink.closed:
                    s.sink.close()

    report.rows_out = report.rows_in - report.spreads_dropped - report.unmapped_dropped
    report.rows_out -= report.duplicates_dropped
    if report.rows_in == 0:
        report.warnings.append(f"{src.name}: 0 records; wrote an empty partition")
    if cleaner.unmapped:
        ids = ", ".join(str(i) for i in sorted(cleaner.unmapped)[:10])
        report.warnings.append(
            f"{src.name}: {report.unmapped_dropped} rows of instrument_id(s) {ids} have no "
            "symbol mapping on their date and were dropped"
        )
    if report.undef_price_rows:
        report.warnings.append(
            f"{src.name}: {report.undef_price_rows} rows carry UNDEF_PRICE (null prices)"
        )
    return report


def _spill(spills: dict[int, _Spill], spill_dir: Path, part: pl.DataFrame) -> None:
    iid = int(part["instrument_id"][0])
    spill = spills.get(iid)
    table = _to_arrow(part)
    if spill is None:
        path = spill_dir / f"{iid}.arrow"
        sink = pa.OSFile(str(path), "wb")
        spill = _Spill(path, ipc.new_stream(sink, RAW_BARS_ARROW_SCHEMA), sink)
        spills[iid] = spill
    ts = part["ts_event"].to_physical()
    first, last = int(ts[0]), int(ts[-1])
    if spill.clean and (first <= spill.last_ts or (len(ts) > 1 and int(ts.diff().min()) <= 0)):
        spill.clean = False
    spill.last_ts = max(spill.last_ts, last)
    spill.rows += part.height
    spill.writer.write_table(table)
