"""The raw_bars parquet layout, and DBN bar records turned into Arrow batches in it.

Strings that hold one value per instrument segment are written as one-entry
dictionaries, so a batch never builds a string per row; validation reads them back as
constants (see :class:`foxhunt_pipeline.schemas.StreamValidator`).
"""

from __future__ import annotations

from typing import Any

import databento_dbn
import numpy as np
import polars as pl
import pyarrow as pa

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


def _empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=WRITE_SCHEMA)
