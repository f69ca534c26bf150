"""The raw_bars parquet layout, and DBN bar records turned into Arrow batches in it.

Strings that hold one value per instrument segment are written as one-entry
dictionaries, so a batch never builds a string per row; validation reads them back as
constants (see :class:`foxhunt_pipeline.contracts.schemas.StreamValidator`).
"""

from __future__ import annotations

from typing import Any

import databento_dbn
import numpy as np
import polars as pl
import pyarrow as pa

from foxhunt_pipeline.contracts.schemas import MAX_BAR_VOLUME
from foxhunt_pipeline.contracts.tables import RAW_BARS_ARROW_SCHEMA, RAW_BARS_POLARS_SCHEMA

UNDEF_PRICE = databento_dbn.UNDEF_PRICE
PRICE_SCALE = 1e9
PRICE_COLUMNS = ("open", "high", "low", "close")
KEY_COLUMNS = ("instrument_id", "ts_event", "publisher_id")

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

STRING_COLUMNS = ("symbol", "root", "source_file")


def _const_dict(value: str | None, n: int) -> pa.DictionaryArray:
    """A string column of one repeated value as a one-entry dictionary (no per-row strings;
    the parquet writer stores it as a dictionary page plus run-length indices)."""
    if value is None:
        return pa.DictionaryArray.from_arrays(pa.nulls(n, pa.int32()), pa.array([], pa.string()))
    global _ZEROS
    if n > _ZEROS_CAP:
        return pa.DictionaryArray.from_arrays(np.zeros(n, dtype=np.int32), pa.array([value]))
    if len(_ZEROS) < n:
        _ZEROS = np.zeros(min(max(n, 2 * len(_ZEROS)), _ZEROS_CAP), dtype=np.int32)
        _ZEROS.flags.writeable = False
    return pa.DictionaryArray.from_arrays(_ZEROS[:n], pa.array([value]))


# shared, read-only indices for the one-value dictionaries (Arrow arrays are immutable), so
# a batch does not allocate and zero three index arrays; at most 4 MiB is kept
_ZEROS_CAP = 1 << 20
_ZEROS = np.zeros(0, dtype=np.int32)


def raw_bars_batch(
    recs: np.ndarray,
    symbol: str,
    root: str | None,
    source_file: str,
    screen: BatchScreen | None = None,
) -> tuple[pa.RecordBatch, int]:
    """Batch in the on-disk raw_bars layout (:data:`WRITE_SCHEMA`); also the number of rows
    with an UNDEF price. Fixed-point prices become float64, UNDEF_PRICE becomes null.

    ``screen``: filled with whether the batch, alone, passes the raw_bars contract's
    row checks (see :class:`BatchScreen`), judged on the very arrays the batch holds."""
    n = len(recs)
    ts = np.ascontiguousarray(recs["ts_event"]).view(np.int64)
    cols: list[pa.Array] = [
        pa.array(ts, pa.int64()).view(pa.timestamp("ns", tz="UTC")),
        pa.array(np.ascontiguousarray(recs["rtype"]), pa.uint8()),
        pa.array(np.ascontiguousarray(recs["publisher_id"]), pa.uint16()),
        pa.array(np.ascontiguousarray(recs["instrument_id"]), pa.uint32()),
        _const_dict(symbol, n),
        _const_dict(root, n),
    ]
    any_undef: np.ndarray | None = None
    prices: list[np.ndarray] = []
    for c in PRICE_COLUMNS:
        raw = recs[c]
        undef = raw == UNDEF_PRICE
        px = raw / PRICE_SCALE
        prices.append(px)
        if undef.any():
            any_undef = undef if any_undef is None else any_undef | undef
            cols.append(pa.array(px, pa.float64(), mask=undef))
        else:
            cols.append(pa.array(px, pa.float64()))
    volume = np.ascontiguousarray(recs["volume"])
    cols.append(pa.array(volume, pa.uint64()))
    cols.append(_const_dict(source_file, n))
    n_undef = 0 if any_undef is None else int(any_undef.sum())
    if screen is not None:
        screen.passed = n > 0 and n_undef == 0 and root is not None and screen.judge(ts, prices, volume)
    return pa.RecordBatch.from_arrays(cols, schema=WRITE_SCHEMA), n_undef


class BatchScreen:
    """The raw_bars screen done in numpy on a batch's own arrays, instead of a polars pass
    over the finished batch (which cost as much as the rest of the batch put together).

    Like :func:`foxhunt_pipeline.contracts.schemas.screen_passes` it may only be too strict: True
    means every row passes the contract's checks (positive finite prices, consistent OHLC, volume within bounds,
    ``ts_event`` inside the metadata range and strictly increasing, no nulls); the step
    from the previous batch is left to :meth:`StreamValidator.feed_passed`. It applies
    only to a schema whose checks are exactly :data:`CHECKS` (see :meth:`for_schema`)."""

    # (column or None for a frame check, check name, its statistics): exactly what the
    # numpy judgement below covers
    CHECKS = frozenset(
        {
            *((c, "greater_than", (("min_value", 0),)) for c in PRICE_COLUMNS),
            *((c, "finite", ()) for c in PRICE_COLUMNS),
            ("volume", "less_than_or_equal_to", (("max_value", MAX_BAR_VOLUME),)),
            ("ts_event", "ts_event_in_metadata_range", ()),
            (None, "ohlc_consistent", ()),
            (None, "ts_event_increasing_per_instrument", ()),
            (None, "unique_instrument_id_ts_event_publisher_id", ()),
        }
    )

    def __init__(self, start_ns: int | None, end_ns: int | None) -> None:
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.passed = False

    @classmethod
    def for_schema(
        cls, schema: Any, start_ns: int | None, end_ns: int | None
    ) -> BatchScreen | None:
        """A screen for ``schema`` (pandera), or None when it carries a check this screen
        does not know (then every batch goes through the schema's own screen)."""

        def key(column: str | None, check: Any) -> tuple:
            return column, check.name, tuple(sorted((check.statistics or {}).items()))

        names = {key(None, k) for k in schema.checks}
        for col_name, col in schema.columns.items():
            names |= {key(col_name, k) for k in col.checks}
        expected = {n: c.dtype.type for n, c in schema.columns.items()}
        layout = dict(RAW_BARS_POLARS_SCHEMA)
        return cls(start_ns, end_ns) if names <= cls.CHECKS and expected == layout else None

    def judge(self, ts: np.ndarray, prices: list[np.ndarray], volume: np.ndarray) -> bool:
        o, h, lo, c = prices
        if len(volume) and int(volume.max()) > MAX_BAR_VOLUME:
            return False
        if len(ts) > 1 and not bool((ts[1:] > ts[:-1]).all()):
            return False
        if self.start_ns is not None and int(ts[0]) < self.start_ns:
            return False
        if self.end_ns is not None and int(ts[-1]) >= self.end_ns:
            return False
        # every price is a finite int64 over 1e9; > 0 on the low and OHLC order imply the rest
        if not bool((lo > 0).all()):
            return False
        return bool((lo <= np.minimum(o, c)).all() and (np.maximum(o, c) <= h).all())


def validation_view(batch: pa.RecordBatch) -> tuple[pl.DataFrame, dict[str, str | None]]:
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


def empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=WRITE_SCHEMA)
