"""Every warehouse table's name and the Arrow / polars layout of ``raw_bars``: the one
place the decoder, the warehouse and the object store agree on."""

from __future__ import annotations

import polars as pl
import pyarrow as pa

RAW_BARS = "raw_bars"
VIEW_TABLES = ("raw_bars", "continuous_bars", "features")
# append-only tables: a DuckDB table on a local warehouse, one parquet object per write on a
# store (where each pod has its own DuckDB file); their views exist only on stores
PART_TABLES = ("model_evaluations",)


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

