"""Writing DBN files byte-for-byte as Databento lays them out, from numpy arrays.

The generator and the tests that need deliberately broken inputs (crossed bars,
UNDEF_PRICE, duplicates, empty files, unsorted records, non-bar schemas) share
this one writer, so a bad-input test exercises exactly the file format that
real downloads have. Nothing here validates records: what you pass is what
lands.

Layout: the DBN metadata header (``databento_dbn.Metadata.encode()``) followed
by the raw records, zstd-compressed as one stream when the name ends in
``.zst``. An OHLCV record is 56 bytes, little-endian: the 16-byte RecordHeader
(length in 4-byte words, rtype, publisher_id, instrument_id, ts_event) and
open/high/low/close as int64 fixed point (1e-9) and volume as uint64;
:data:`OHLCV_DTYPE` mirrors ``databento_dbn.OHLCVMsg._dtypes`` and a test checks
it against ``bytes(OHLCVMsg(...))``.
"""

from __future__ import annotations

import contextlib
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import databento_dbn as dbn
import numpy as np
import zstandard

from foxhunt_pipeline.basics.atomic import atomic_write

DATASET = "GLBX.MDP3"
GLBX_PUBLISHER_ID = 1  # GLBX.MDP3.GLBX
FIXED_PRICE_SCALE = 1_000_000_000
UNDEF_PRICE = dbn.UNDEF_PRICE  # i64::MAX: "no price"

OHLCV_DTYPE = np.dtype(
    [
        ("length", "u1"),
        ("rtype", "u1"),
        ("publisher_id", "<u2"),
        ("instrument_id", "<u4"),
        ("ts_event", "<u8"),
        ("open", "<i8"),
        ("high", "<i8"),
        ("low", "<i8"),
        ("close", "<i8"),
        ("volume", "<u8"),
    ]
)
OHLCV_LENGTH_WORDS = OHLCV_DTYPE.itemsize // 4  # RecordHeader.length counts 4-byte words

RTYPE_BY_SCHEMA: dict[str, int] = {
    "ohlcv-1s": int(dbn.RType.OHLCV_1S),
    "ohlcv-1m": int(dbn.RType.OHLCV_1M),
    "ohlcv-1h": int(dbn.RType.OHLCV_1H),
    "ohlcv-1d": int(dbn.RType.OHLCV_1D),
}
STEP_SECONDS: dict[str, int] = {"ohlcv-1s": 1, "ohlcv-1m": 60, "ohlcv-1h": 3600, "ohlcv-1d": 86400}


class LandedFileConflict(FileExistsError):
    """A landed file is immutable: refusing to replace it with different content."""


@dataclass(frozen=True)
class Mapping:
    """One raw symbol -> instrument_id interval, ``end_date`` exclusive (Databento's rule)."""

    raw_symbol: str
    instrument_id: int
    start_date: date
    end_date: date


@dataclass(frozen=True)
class _Interval:  # satisfies databento_dbn.metadata.MappingInterval
    start_date: date
    end_date: date
    symbol: str


@dataclass(frozen=True)
class _SymbolMapping:  # satisfies databento_dbn.metadata.SymbolMapping
    raw_symbol: str
    intervals: list[_Interval]


def ohlcv_records(
    instrument_id: Any,
    ts_event: Any,
    open: Any,
    high: Any,
    low: Any,
    close: Any,
    volume: Any,
    *,
    schema: str = "ohlcv-1m",
    publisher_id: Any = GLBX_PUBLISHER_ID,
) -> np.ndarray:
    """Structured OHLCV records from broadcastable arrays; prices already in 1e-9 fixed point."""
    cols = np.broadcast_arrays(
        np.asarray(instrument_id),
        np.asarray(ts_event),
        np.asarray(open),
        np.asarray(high),
        np.asarray(low),
        np.asarray(close),
        np.asarray(volume),
        np.asarray(publisher_id),
    )
    out = np.empty(cols[0].shape, dtype=OHLCV_DTYPE)
    out["length"] = OHLCV_LENGTH_WORDS
    out["rtype"] = rtype_for(schema)
    for name, col in zip(
        ("instrument_id", "ts_event", "open", "high", "low", "close", "volume", "publisher_id"),
        cols,
        strict=True,
    ):
        out[name] = col
    return out.reshape(-1)


def rtype_for(schema: str) -> int:
    try:
        return RTYPE_BY_SCHEMA[schema]
    except KeyError:
        raise ValueError(
            f"unsupported bar schema {schema!r}; expected one of {', '.join(RTYPE_BY_SCHEMA)}"
        ) from None


def sort_records(records: np.ndarray) -> np.ndarray:
    """Databento order: by ts_event, then instrument_id (stable)."""
    return records[np.lexsort((records["instrument_id"], records["ts_event"]))]


def encode_metadata(
    *,
    schema: str,
    start: int,
    end: int | None,
    symbols: Sequence[str],
    mappings: Sequence[Mapping] = (),
    stype_in: str = "parent",
    dataset: str = DATASET,
    version: int = 3,
    limit: int | None = None,
) -> bytes:
    grouped: dict[str, list[_Interval]] = defaultdict(list)
    for m in mappings:
        grouped[m.raw_symbol].append(_Interval(m.start_date, m.end_date, str(m.instrument_id)))
    meta = dbn.Metadata(
        dataset=dataset,
        start=int(start),
        end=None if end is None else int(end),
        stype_in=dbn.SType(stype_in),
        stype_out=dbn.SType.INSTRUMENT_ID,
        schema=dbn.Schema(schema),
        symbols=list(symbols),
        partial=[],
        not_found=[],
        mappings=[
            _SymbolMapping(sym, sorted(iv, key=lambda i: i.start_date))
            for sym, iv in grouped.items()
        ],
        limit=limit,
        ts_out=False,
        version=version,
    )
    return meta.encode()


def _as_chunks(records: np.ndarray | Iterable[Any]) -> Iterator[bytes]:
    if isinstance(records, np.ndarray):
        yield records.tobytes()
        return
    for rec in records:
        if isinstance(rec, np.ndarray):
            yield rec.tobytes()
        else:  # a databento_dbn record (OHLCVMsg, TradeMsg, MBOMsg, ...) or raw bytes
            yield bytes(rec)


def generate_file(
    path: str | os.PathLike[str],
    records: np.ndarray | Iterable[Any],
    *,
    schema: str,
    start: int,
    end: int | None,
    symbols: Sequence[str],
    mappings: Sequence[Mapping] = (),
    stype_in: str = "parent",
    dataset: str = DATASET,
    version: int = 3,
    compress: bool | None = None,
) -> Path:
    """Write ONE DBN file from explicit records, exactly as given (no sorting, no checks).

    ``records``: an :data:`OHLCV_DTYPE` array (see :func:`ohlcv_records`), or an
    iterable of such arrays (streamed chunk by chunk) or of ``databento_dbn``
    record objects / raw bytes (any schema, e.g. ``TradeMsg`` for a "not bars"
    file). ``start``/``end`` are UTC ns for the metadata. Compressed with zstd
    when ``compress`` is True or, by default, when the name ends in ``.zst``.
    An existing file with the same bytes is left alone; different bytes raise
    :class:`LandedFileConflict` naming the file. Written atomically (temporary
    file in the same folder, then rename), so a reader never sees half a file.
    """
    path = Path(path)
    if compress is None:
        compress = path.suffix == ".zst"
    header = encode_metadata(
        schema=schema,
        start=start,
        end=end,
        symbols=symbols,
        mappings=mappings,
        stype_in=stype_in,
        dataset=dataset,
        version=version,
    )

    def write(tmp: Path) -> None:
        with tmp.open("wb") as raw:
            if compress:
                cctx = zstandard.ZstdCompressor(level=3)
                with cctx.stream_writer(raw, closefd=False) as zw:
                    zw.write(header)
                    for chunk in _as_chunks(records):
                        zw.write(chunk)
            else:
                raw.write(header)
                for chunk in _as_chunks(records):
                    raw.write(chunk)

    return land(path, write)


def land(path: Path, write: Callable[[Path], object]) -> Path:
    """Write a landed file once: ``write(tmp)`` beside ``path``, then rename it in unless
    ``path`` exists. The same bytes already there are left alone; different bytes raise
    :class:`LandedFileConflict` naming the file (landed files are immutable)."""

    def checked(tmp: Path) -> None:
        write(tmp)
        if path.exists():
            if _same_bytes(tmp, path):
                raise _AlreadyLanded
            raise LandedFileConflict(
                f"{path}: a landed file with different content already exists; "
                "landed files are immutable, write to another folder or remove it yourself"
            )

    with contextlib.suppress(_AlreadyLanded):
        atomic_write(path, checked, overwrite=False)
    return path


class _AlreadyLanded(Exception):
    """The same bytes are already landed: nothing to write."""


def _same_bytes(a: Path, b: Path, block: int = 1 << 20) -> bool:
    if a.stat().st_size != b.stat().st_size:
        return False
    with a.open("rb") as fa, b.open("rb") as fb:
        while True:
            x, y = fa.read(block), fb.read(block)
            if x != y:
                return False
            if not x:
                return True
