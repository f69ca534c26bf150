"""pandera (polars backend) contracts for raw_bars and continuous_bars.

The checks are polars expressions; validation is lazy, so every failing check and row
is reported at once. ``validate_frame`` turns pandera's errors into a count and a small
table, which the blocking Dagster asset checks show as metadata.

pandera's cost is mostly per call (dozens of lazy queries per frame), so each contract
also carries a *screen*: one vectorised polars pass that is True only when pandera is
certain to pass (right columns and dtypes, no nulls, positive finite prices, consistent
OHLC, inside the range, strictly increasing time within contiguous key groups). A
frame the screen passes is clean; any other frame goes to pandera, whose report is
used as is. The screen can only be too strict, never too lenient
(tests/contracts/test_schemas.py checks it against pandera on perturbed frames).

This module defines the contracts; the parts live beside it:
:mod:`~foxhunt_pipeline.contracts.checks` (the custom checks),
:mod:`~foxhunt_pipeline.contracts.screen` (the screen) and
:mod:`~foxhunt_pipeline.contracts.validation` (validating and summarising).
"""

from __future__ import annotations

from datetime import datetime

import pandera.polars as pa
import polars as pl

from foxhunt_pipeline.contracts.checks import (
    finite,
    in_range,
    increasing_within,
    ohlc_consistent,
    unique_over,
)
from foxhunt_pipeline.contracts.screen import (
    FRAME_CHECKS_IMPLIED_BY_ORDER,
    SCREEN_KEY,
    screen_passes,
    with_screen,
)
from foxhunt_pipeline.contracts.validation import (
    FAILURE_SCHEMA,
    StreamValidator,
    ValidationResult,
    validate_frame,
    validate_parquet,
)

TS = pl.Datetime("ns", "UTC")
PRICE_COLUMNS = ("open", "high", "low", "close")
RAW_KEY = ["instrument_id", "ts_event", "publisher_id"]
# a bar's volume above this is a broken record (a u64 near 2**64 is a negative number
# written unsigned): far above any CME product's whole-day volume, and low enough that
# sums over millions of bars never approach 2**63
MAX_BAR_VOLUME = 10**9


def _ts_ns(value: datetime | int) -> int:
    if isinstance(value, int):
        return value
    if hasattr(value, "value") and hasattr(value, "nanosecond"):  # pandas Timestamp: ns-exact
        return int(value.value)
    return int(pl.Series([value]).cast(TS).to_physical()[0])


def _price_column() -> pa.Column:
    return pa.Column(
        pl.Float64,
        nullable=False,
        checks=[pa.Check.gt(0), pa.Check(finite, name="finite")],
    )


def _bar_columns(start_ns: int | None, end_ns: int | None) -> dict[str, pa.Column]:
    ts_checks = []
    if start_ns is not None or end_ns is not None:
        ts_checks.append(pa.Check(in_range(start_ns, end_ns), name="ts_event_in_metadata_range"))
    return {
        "ts_event": pa.Column(TS, nullable=False, checks=ts_checks),
        "rtype": pa.Column(pl.UInt8, nullable=False),
        "publisher_id": pa.Column(pl.UInt16, nullable=False),
        "instrument_id": pa.Column(pl.UInt32, nullable=False),
        "symbol": pa.Column(pl.String, nullable=False),
        "root": pa.Column(pl.String, nullable=False),
        **{c: _price_column() for c in PRICE_COLUMNS},
        "volume": pa.Column(pl.UInt64, nullable=False, checks=[pa.Check.le(MAX_BAR_VOLUME)]),
    }


def raw_bars_schema(
    start: datetime | int | None = None, end: datetime | int | None = None
) -> pa.DataFrameSchema:
    """raw_bars contract; ``[start, end)`` is the source file's metadata range."""
    start_ns = None if start is None else _ts_ns(start)
    end_ns = None if end is None else _ts_ns(end)
    cols = _bar_columns(start_ns, end_ns)
    cols["source_file"] = pa.Column(pl.String, nullable=False)
    schema = pa.DataFrameSchema(
        cols,
        checks=[
            pa.Check(ohlc_consistent, name="ohlc_consistent"),
            pa.Check(
                increasing_within(["instrument_id", "publisher_id"]),
                name="ts_event_increasing_per_instrument",
            ),
            pa.Check(unique_over(RAW_KEY), name="unique_instrument_id_ts_event_publisher_id"),
        ],
        strict=True,
        name="raw_bars",
    )
    return with_screen(schema, "instrument_id", start_ns, end_ns)


def continuous_bars_schema() -> pa.DataFrameSchema:
    cols = _bar_columns(None, None)
    cols["contract_seq"] = pa.Column(pl.Int32, nullable=False, checks=[pa.Check.ge(0)])
    cols["expiry"] = pa.Column(pl.Date, nullable=False)
    schema = pa.DataFrameSchema(
        cols,
        checks=[
            pa.Check(ohlc_consistent, name="ohlc_consistent"),
            pa.Check(
                increasing_within(["root", "publisher_id"]), name="ts_event_increasing_per_root"
            ),
            pa.Check(
                unique_over(["root", "ts_event", "publisher_id"]),
                name="unique_root_ts_event_publisher_id",
            ),
        ],
        strict=True,
        name="continuous_bars",
    )
    return with_screen(schema, "root", None, None)


__all__ = [
    "FAILURE_SCHEMA",
    "FRAME_CHECKS_IMPLIED_BY_ORDER",
    "MAX_BAR_VOLUME",
    "PRICE_COLUMNS",
    "RAW_KEY",
    "SCREEN_KEY",
    "TS",
    "StreamValidator",
    "ValidationResult",
    "continuous_bars_schema",
    "raw_bars_schema",
    "screen_passes",
    "validate_frame",
    "validate_parquet",
]
