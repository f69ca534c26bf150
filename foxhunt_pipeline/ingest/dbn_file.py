"""Opening a landed DBN file: the strict zstd reader that notices truncation, the
``DBNStore`` wrapper, and the errors that name the file and the problem.

The landed file is only ever opened for reading."""

from __future__ import annotations

import io
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import databento as db
import databento_dbn
import numpy as np
import pandas as pd
import pyarrow as pa
import zstandard
from databento.common.error import BentoError
from databento_dbn import Compression

from foxhunt_pipeline.basics.utc import UTC_OFFSET, iso_utc
from foxhunt_pipeline.instruments.specs import parse_outright

BAR_SCHEMAS = ("ohlcv-1s", "ohlcv-1m", "ohlcv-1h", "ohlcv-1d", "ohlcv-eod")
# the record type each bar schema's records carry (databento_dbn.RType.from_schema)
RTYPE_OF = {
    s: int(databento_dbn.RType.from_schema(databento_dbn.Schema.from_str(s)).value)
    for s in BAR_SCHEMAS
}
SCHEMA_OF_RTYPE = {r: s for s, r in RTYPE_OF.items()}
UNDEF_TIMESTAMP = databento_dbn.UNDEF_TIMESTAMP


class DbnInputError(ValueError):
    """A landed file that cannot become raw_bars; the message names the file and why."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{self.path.name}: {problem} (file: {self.path})")


class NsRange:
    """``start`` / ``end`` as ns-exact UTC Timestamps (``datetime`` subclasses) of a file's
    metadata range, from the ``start_ns`` / ``end_ns`` integers the dataclass stores."""

    start_ns: int
    end_ns: int | None

    @property
    def start(self) -> pd.Timestamp:
        return pd.Timestamp(self.start_ns, unit="ns", tz="UTC")

    @property
    def end(self) -> pd.Timestamp | None:
        return None if self.end_ns is None else pd.Timestamp(self.end_ns, unit="ns", tz="UTC")


@dataclass(frozen=True)
class DbnMetadata(NsRange):
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



class _CheckedZstdReader(io.RawIOBase):
    """Multi-frame zstd reader that raises on a truncated final frame.

    The reader ``DBNStore`` uses stops silently when a frame is cut short, which would
    turn a half-copied file into a silently shorter partition. Arrow's zstd stream
    reports it ("Truncated compressed stream") and decompresses straight into the
    buffer it returns: a record chunk (``to_ndarray(count=...)`` reads megabytes) comes
    back as a zero-copy ``memoryview`` of it; small reads (headers, the 64 KiB reads of
    record iteration, whose decoder takes ``bytes`` only) as ``bytes``.
    """

    ZERO_COPY_MIN = 1 << 20

    def __init__(self, path: Path) -> None:
        self._path = path
        self._stream = pa.CompressedInputStream(pa.OSFile(str(path)), "zstd")
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

    def _read_buffer(self, size: int | None) -> pa.Buffer:
        try:
            buf = self._stream.read_buffer(size)
            if size is not None and 0 < buf.size < size:  # top up a short read
                parts = [buf]
                while (got := sum(p.size for p in parts)) < size:
                    more = self._stream.read_buffer(size - got)
                    if not more.size:
                        break
                    parts.append(more)
                buf = pa.py_buffer(b"".join(p.to_pybytes() for p in parts))
        except OSError as exc:
            if "truncated" in str(exc).lower():
                raise DbnInputError(
                    self._path, "truncated zstd stream (last frame is incomplete)"
                ) from exc
            raise DbnInputError(self._path, f"corrupt zstd data ({exc})") from exc
        return buf

    def read(self, size: int | None = -1) -> bytes | memoryview:  # type: ignore[override]
        buf = self._read_buffer(None if size is None or size < 0 else size)
        self._pos += buf.size
        return memoryview(buf) if buf.size >= self.ZERO_COPY_MIN else buf.to_pybytes()

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._stream.close()
        super().close()


class StrictDBNStore(db.DBNStore):
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


def open_store(src: Path) -> StrictDBNStore:
    src = Path(src)
    if not src.is_file():
        raise DbnInputError(src, "no such file")
    if src.stat().st_size == 0:
        raise DbnInputError(src, "empty file (0 bytes); not a DBN file")
    try:
        store = StrictDBNStore.from_file(src)
    except (BentoError, databento_dbn.DBNError, zstandard.ZstdError, ValueError) as exc:
        raise _diagnose(src, exc) from exc
    store.source_path = src
    return store


def metadata_of(src: Path, store: db.DBNStore) -> DbnMetadata:
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
    return metadata_of(src, open_store(src))


# ------------------------------------------------------------------ symbology


def check_bars(
    src: Path,
    meta: DbnMetadata,
    schemas: Sequence[str] = BAR_SCHEMAS,
    datasets: Collection[str] | None = None,
    plausible: bool = True,
) -> None:
    """Refuse, before any record is read, a file whose header says it cannot be bars of
    this home: another schema or dataset, or dates outside :data:`PLAUSIBLE_NS`."""
    if meta.schema is None:
        raise DbnInputError(src, "mixed-schema DBN stream; raw_bars needs one ohlcv schema")
    if meta.schema not in BAR_SCHEMAS:
        raise DbnInputError(
            src,
            f"DBN schema {meta.schema!r} is not a bar schema; raw_bars accepts "
            f"{', '.join(schemas)}",
        )
    if meta.schema not in schemas:
        raise DbnInputError(
            src,
            f"{meta.schema} bars are not supported: this home's bar size is "
            f"{' / '.join(x.removeprefix('ohlcv-') for x in schemas)}; land "
            f"{' or '.join(schemas)} files instead (foxhunt download --schema {schemas[0]})",
        )
    if datasets is not None and meta.dataset not in datasets:
        raise DbnInputError(
            src,
            f"dataset {meta.dataset!r} is not supported; raw_bars accepts "
            f"{', '.join(sorted(datasets))} (CME Globex futures)",
        )
    if not plausible:
        return
    lo, hi = plausible_ns()
    end = meta.end_ns if meta.end_ns is not None else meta.start_ns
    if meta.start_ns < lo or end > hi:
        raise DbnInputError(
            src,
            f"implausible dates: the header says {iso_utc(meta.start_ns, zone=UTC_OFFSET)} .. "
            f"{iso_utc(meta.end_ns, zone=UTC_OFFSET) if meta.end_ns is not None else 'open end'}, outside "
            f"{iso_utc(lo, zone=UTC_OFFSET)} .. {iso_utc(hi, zone=UTC_OFFSET)} (CME Globex history up to tomorrow)",
        )


# CME Globex data on Databento (GLBX.MDP3) starts on 2010-06-06; nothing is dated after
# tomorrow (UTC). A header or a bar outside this range is a broken or crafted file.
PLAUSIBLE_START = pd.Timestamp("2010-01-01", tz="UTC")
PLAUSIBLE_FUTURE = pd.Timedelta(days=2)


def plausible_ns(now: pd.Timestamp | None = None) -> tuple[int, int]:
    """[lo, hi) in ns of the dates a bar may carry."""
    now = now or pd.Timestamp.now(tz="UTC")
    return int(PLAUSIBLE_START.value), int((now.normalize() + PLAUSIBLE_FUTURE).value)


def check_rtype(src: Path, schema: str, rtypes: np.ndarray) -> None:
    """Every record must be of the record type its header's schema promises (an
    ohlcv-1h record in an ohlcv-1m file would be read as a minute)."""
    expected = RTYPE_OF[schema]
    bad = rtypes != expected
    if bad.any():
        got = sorted({int(x) for x in np.unique(rtypes[bad])})
        names = ", ".join(SCHEMA_OF_RTYPE.get(r, f"rtype {r}") for r in got)
        raise DbnInputError(
            src,
            f"{int(bad.sum())} records are {names} but the header says {schema} "
            f"(rtype {expected}); refusing the file rather than mixing bar sizes",
        )


def check_roots(src: Path, meta: DbnMetadata, known: Collection[str]) -> None:
    """Refuse a file whose header names a product outside the instrument table (parent
    ``6E.FUT`` or a raw outright ``6EH4``): its bars could not be rolled or costed."""
    roots = set()
    for sym in meta.symbols:
        if sym.endswith(".FUT"):
            roots.add(sym.removesuffix(".FUT"))
        elif (parsed := parse_outright(sym, meta.start.date())) is not None:
            roots.add(parsed[0])
    if unknown := sorted(roots - set(known)):
        raise DbnInputError(src, unknown_root_problem(unknown))


def unknown_root_problem(roots: Collection[str]) -> str:
    return (
        f"futures root(s) {', '.join(sorted(roots))} not in the instrument table "
        "(foxhunt_pipeline/instruments/specs.py ROOTS); add the product there "
        "(docs/contracts.md, 'Adding a product') and land the file again"
    )
