"""Small DBN files for tests, written with databento_dbn's own encoder.

Parent symbology (``ES.FUT``) with child-contract mappings, spreads as their own
instruments, and hooks for crafted bad records (crossed bars, UNDEF prices).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from pathlib import Path
from types import SimpleNamespace

import databento_dbn as dbn
import numpy as np
import zstandard
from databento.common.constants import SCHEMA_STRUCT_MAP

SAMPLE_DBN = Path(__file__).resolve().parent / "data" / "dbn"  # vendored real samples
NS = 10**9
SCHEMAS = {
    "ohlcv-1s": dbn.Schema.OHLCV_1S,
    "ohlcv-1m": dbn.Schema.OHLCV_1M,
    "ohlcv-1h": dbn.Schema.OHLCV_1H,
    "ohlcv-1d": dbn.Schema.OHLCV_1D,
}
STEP_NS = {"ohlcv-1s": NS, "ohlcv-1m": 60 * NS, "ohlcv-1h": 3600 * NS, "ohlcv-1d": 86400 * NS}


@dataclass(frozen=True)
class Instrument:
    instrument_id: int
    raw_symbol: str
    start: date
    end: date  # exclusive


def shared_file(name: str) -> Path:
    return SAMPLE_DBN / name


def bar_dtype(schema: str = "ohlcv-1m") -> np.dtype:
    return np.dtype(SCHEMA_STRUCT_MAP[SCHEMAS[schema]]._dtypes)


def make_records(
    instrument_id: int,
    ts_start_ns: int,
    n: int,
    *,
    schema: str = "ohlcv-1m",
    price: float = 4800.0,
    volume: int = 10,
    publisher_id: int = 1,
    step_ns: int | None = None,
) -> np.ndarray:
    """n well-formed bars for one instrument (open=close=price, high/low one point away)."""
    a = np.zeros(n, dtype=bar_dtype(schema))
    a["length"] = a.dtype.itemsize // 4
    a["rtype"] = int(dbn.RType.from_schema(SCHEMAS[schema]).value)
    a["publisher_id"] = publisher_id
    a["instrument_id"] = instrument_id
    a["ts_event"] = ts_start_ns + np.arange(n, dtype=np.uint64) * (step_ns or STEP_NS[schema])
    px = (price + 0.25 * (np.arange(n) % 8)) * NS
    a["open"] = px
    a["close"] = px + 0.25 * NS
    a["high"] = px + 1.0 * NS
    a["low"] = px - 1.0 * NS
    a["volume"] = volume
    return a


def encode_dbn(
    records: np.ndarray | list[np.ndarray],
    *,
    start_ns: int,
    end_ns: int | None,
    instruments: list[Instrument],
    schema: str = "ohlcv-1m",
    symbols: tuple[str, ...] = ("ES.FUT",),
    stype_in: dbn.SType = dbn.SType.PARENT,
    version: int = 3,
    dataset: str = "GLBX.MDP3",
) -> bytes:
    """Uncompressed DBN bytes: metadata header with child-contract mappings + records."""
    mappings = [
        SimpleNamespace(
            raw_symbol=i.raw_symbol,
            intervals=[
                SimpleNamespace(start_date=i.start, end_date=i.end, symbol=str(i.instrument_id))
            ],
        )
        for i in instruments
    ]
    meta = dbn.Metadata(
        dataset=dataset,
        start=start_ns,
        stype_in=stype_in,
        stype_out=dbn.SType.INSTRUMENT_ID,
        schema=SCHEMAS[schema],
        symbols=list(symbols),
        mappings=mappings,
        end=end_ns,
        version=version,
    )
    body = np.concatenate(records) if isinstance(records, list) else records
    return meta.encode() + body.tobytes()


def write_dbn(path: Path, raw: bytes, *, compress: bool | None = None) -> Path:
    """Write ``raw`` (zstd-compressed if the name ends in .zst or compress=True)."""
    if compress is None:
        compress = path.name.endswith(".zst")
    data = zstandard.ZstdCompressor(write_checksum=True).compress(raw) if compress else raw
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def day_ns(d: date) -> int:
    return int(np.datetime64(d, "ns").astype(np.int64))


def es_day_file(
    path: Path,
    day: date,
    *,
    n: int = 30,
    front_volume: int = 100,
    back_volume: int = 10,
    spread_volume: int = 5,
    schema: str = "ohlcv-1m",
    version: int = 3,
) -> Path:
    """One UTC day of ESH4 (id 100), ESM4 (id 200) and the spread ESH4-ESM4 (id 300)."""
    start = day_ns(day) + 14 * 3600 * NS  # 08:00 CT: inside the session
    insts = [
        Instrument(100, "ESH4", date(2024, 1, 1), date(2024, 3, 16)),
        Instrument(200, "ESM4", date(2024, 1, 1), date(2024, 6, 22)),
        Instrument(300, "ESH4-ESM4", date(2024, 1, 1), date(2024, 3, 16)),
    ]
    recs = [
        make_records(100, start, n, schema=schema, volume=front_volume),
        make_records(200, start, n, schema=schema, price=4850.0, volume=back_volume),
        make_records(300, start, n, schema=schema, price=-50.0, volume=spread_volume),
    ]
    # interleave by time, as a real file is ordered
    body = np.concatenate(recs)
    body = body[np.argsort(body["ts_event"], kind="stable")]
    raw = encode_dbn(
        body,
        start_ns=day_ns(day),
        end_ns=day_ns(day) + 86400 * NS,
        instruments=insts,
        schema=schema,
        version=version,
    )
    return write_dbn(path, raw)
