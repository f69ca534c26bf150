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
(tests/test_schemas.py checks it against pandera on perturbed frames).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pandera.polars as pa
import polars as pl
import pyarrow.parquet as pq
from pandera.errors import SchemaError, SchemaErrors
from pandera.polars import PolarsData

TS = pl.Datetime("ns", "UTC")
PRICE_COLUMNS = ("open", "high", "low", "close")
RAW_KEY = ["instrument_id", "ts_event", "publisher_id"]


def _ts_ns(value: datetime | int) -> int:
    if isinstance(value, int):
        return value
    if hasattr(value, "value") and hasattr(value, "nanosecond"):  # pandas Timestamp: ns-exact
        return int(value.value)
    return int(pl.Series([value]).cast(TS).to_physical()[0])


def _finite(data: PolarsData) -> pl.LazyFrame:
    return data.lazyframe.select(pl.col(data.key).is_finite())


def _ohlc_consistent(data: PolarsData) -> pl.LazyFrame:
    lo = pl.min_horizontal("open", "close")
    hi = pl.max_horizontal("open", "close")
    return data.lazyframe.select(
        ((pl.col("low") <= lo) & (hi <= pl.col("high"))).fill_null(False).alias("ohlc")
    )


def _key_order(keys: list[str]) -> tuple[pl.Expr, pl.Expr]:
    """(every row sorts at or after the previous one by ``keys``, row has the previous row's keys)."""
    eq = [pl.col(c) == pl.col(c).shift(1) for c in keys]
    gt = [pl.col(c) > pl.col(c).shift(1) for c in keys]
    after = pl.lit(False)
    for i in range(len(keys)):
        prefix = pl.all_horizontal(eq[:i]) if i else pl.lit(True)
        after = after | (prefix & gt[i])
    same = pl.all_horizontal(eq).fill_null(False)
    return (after.fill_null(True) | same).all().alias("in_order"), same.alias("same")


def _increasing_within(keys: list[str]):
    """ts_event strictly increasing within each group of ``keys``, in row order. Frames whose
    groups are contiguous (sorted by the keys) need one comparison with the previous row; any
    other order falls back to a windowed diff (a hash group-by, slower)."""

    def check(data: PolarsData) -> pl.LazyFrame:
        frame = data.lazyframe.select([*keys, "ts_event"]).collect()
        in_order, same = _key_order(keys)
        stats = frame.select(in_order, same, step=pl.col("ts_event").to_physical().diff())
        if frame.height == 0 or stats["in_order"][0]:
            bad = stats["same"] & (stats["step"] <= 0).fill_null(False)
            return pl.LazyFrame({"increasing": ~bad})
        step = pl.col("ts_event").to_physical().diff().over(keys)
        return frame.lazy().select((step.is_null() | (step > 0)).alias("increasing"))

    check.__name__ = f"ts_event_increasing_per_{'_'.join(keys)}"
    return check


def _unique_over(keys: list[str]):
    """Key uniqueness. Frames in key order (the contract's sort order) are checked by
    comparing each row with the previous one, a single cheap pass; any other order falls
    back to a 64-bit row hash, confirmed exactly on the (rare) hash hits. pandera's
    built-in ``unique=`` costs seconds on millions of rows."""

    def check(data: PolarsData) -> pl.LazyFrame:
        frame = data.lazyframe.select(keys).collect()
        stats = frame.select(*_key_order(keys))
        if frame.height == 0 or stats["in_order"][0]:
            dup = stats["same"]
            return pl.LazyFrame({"unique": ~(dup | dup.shift(-1, fill_value=False))})
        candidate = frame.select(pl.struct(keys).hash().is_duplicated()).to_series()
        if not candidate.any():
            return pl.LazyFrame({"unique": pl.repeat(True, frame.height, eager=True)})
        idx = candidate.arg_true()
        dup = frame[idx].is_duplicated()
        ok = pl.repeat(True, frame.height, eager=True).scatter(idx, ~dup)
        return pl.LazyFrame({"unique": ok})

    check.__name__ = f"unique_{'_'.join(keys)}"
    return check


def _in_range(start_ns: int | None, end_ns: int | None):
    def check(data: PolarsData) -> pl.LazyFrame:
        ts = pl.col(data.key).to_physical()
        ok = pl.lit(True)
        if start_ns is not None:
            ok = ok & (ts >= start_ns)
        if end_ns is not None:
            ok = ok & (ts < end_ns)
        return data.lazyframe.select(ok.alias(data.key))

    return check


SCREEN_KEY = "screen"


def _signature(schema: pa.DataFrameSchema) -> tuple:
    """Everything pandera would check; a screen is only valid for the schema it was made for."""
    cols = tuple(
        (n, str(c.dtype), c.nullable, c.unique, tuple((k.name, k.error) for k in c.checks))
        for n, c in schema.columns.items()
    )
    frame = tuple((k.name, k.error) for k in schema.checks)
    return cols, frame, schema.strict, schema.unique, schema.coerce


def _with_screen(
    schema: pa.DataFrameSchema, group: str, start_ns: int | None, end_ns: int | None
) -> pa.DataFrameSchema:
    schema.metadata = {
        SCREEN_KEY: {
            "group": group,
            "start_ns": start_ns,
            "end_ns": end_ns,
            "signature": _signature(schema),
        }
    }
    return schema


def _column_screen(name: str, check: pa.Check, spec: dict) -> pl.Expr | None:
    """All-rows-pass expression for one column check; None for a check the screen cannot see."""
    c = pl.col(name)
    stats = check.statistics or {}
    if check.name == "greater_than":
        return (c > stats["min_value"]).all()
    if check.name == "greater_than_or_equal_to":
        return (c >= stats["min_value"]).all()
    if check.name == "finite":
        return c.is_finite().all()
    if check.name == "ts_event_in_metadata_range" and name == "ts_event":
        ts = c.to_physical()
        ok = pl.lit(True)
        if spec["start_ns"] is not None:
            ok = ok & (ts.min() >= spec["start_ns"])
        if spec["end_ns"] is not None:
            ok = ok & (ts.max() < spec["end_ns"])
        return ok
    return None


FRAME_CHECKS_IMPLIED_BY_ORDER = ("ts_event_increasing_per_", "unique_")


def screen_passes(
    frame: pl.DataFrame,
    schema: pa.DataFrameSchema,
    constants: Mapping[str, str | None] | None = None,
) -> bool:
    """True only if ``schema.validate(frame)`` is certain to pass; False means "ask pandera".

    ``constants``: String columns absent from ``frame`` that hold one value on every row
    (the one-value symbol/root/source_file columns of an ingest batch), screened without
    being materialised. Sorted contract order (``group`` contiguous and ascending,
    ``ts_event`` strictly increasing within it) implies both the per-group increasing
    check and key uniqueness, so those need one comparison with the previous row.
    """
    spec = (schema.metadata or {}).get(SCREEN_KEY)
    if spec is None or frame.height == 0 or spec["signature"] != _signature(schema):
        return False
    constants = constants or {}
    expected = {n: c.dtype.type for n, c in schema.columns.items()}
    actual = {**dict(frame.schema), **dict.fromkeys(constants, pl.String)}
    if len(actual) != frame.width + len(constants) or actual != expected:
        return False
    if any(v is None for v in constants.values()) or any(frame.null_count().row(0)):
        return False
    if spec["group"] in constants:
        return False
    exprs: list[pl.Expr] = []
    for name, col in schema.columns.items():
        if name in constants and col.checks:
            return False
        for check in col.checks:
            expr = _column_screen(name, check, spec)
            if expr is None:
                return False
            exprs.append(expr)
    for check in schema.checks:
        if check.name == "ohlc_consistent":
            exprs.append(
                (
                    (pl.col("low") <= pl.min_horizontal("open", "close"))
                    & (pl.max_horizontal("open", "close") <= pl.col("high"))
                ).all()
            )
        elif check.name.startswith(FRAME_CHECKS_IMPLIED_BY_ORDER):
            ts = pl.col("ts_event").to_physical()
            g = pl.col(spec["group"])
            after = (g > g.shift(1)) | ((g == g.shift(1)) & (ts > ts.shift(1)))
            exprs.append(after.fill_null(True).all())
        else:
            return False
    # NaN is not null to polars but is to pandera; a column with a finite check already
    # rejects it, any other float column is checked here
    floats = [
        n
        for n, t in expected.items()
        if t.is_float() and not any(k.name == "finite" for k in schema.columns[n].checks)
    ]
    if floats:
        exprs.append(~pl.any_horizontal(pl.col(floats).is_nan().any()))
    return all(frame.select(e.alias(f"c{i}") for i, e in enumerate(exprs)).row(0))


def _price_column() -> pa.Column:
    return pa.Column(
        pl.Float64,
        nullable=False,
        checks=[pa.Check.gt(0), pa.Check(_finite, name="finite")],
    )


def _bar_columns(start_ns: int | None, end_ns: int | None) -> dict[str, pa.Column]:
    ts_checks = []
    if start_ns is not None or end_ns is not None:
        ts_checks.append(pa.Check(_in_range(start_ns, end_ns), name="ts_event_in_metadata_range"))
    return {
        "ts_event": pa.Column(TS, nullable=False, checks=ts_checks),
        "rtype": pa.Column(pl.UInt8, nullable=False),
        "publisher_id": pa.Column(pl.UInt16, nullable=False),
        "instrument_id": pa.Column(pl.UInt32, nullable=False),
        "symbol": pa.Column(pl.String, nullable=False),
        "root": pa.Column(pl.String, nullable=False),
        **{c: _price_column() for c in PRICE_COLUMNS},
        "volume": pa.Column(pl.UInt64, nullable=False, checks=[pa.Check.ge(0)]),
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
            pa.Check(_ohlc_consistent, name="ohlc_consistent"),
            pa.Check(
                _increasing_within(["instrument_id", "publisher_id"]),
                name="ts_event_increasing_per_instrument",
            ),
            pa.Check(_unique_over(RAW_KEY), name="unique_instrument_id_ts_event_publisher_id"),
        ],
        strict=True,
        name="raw_bars",
    )
    return _with_screen(schema, "instrument_id", start_ns, end_ns)


def continuous_bars_schema() -> pa.DataFrameSchema:
    cols = _bar_columns(None, None)
    cols["contract_seq"] = pa.Column(pl.Int32, nullable=False, checks=[pa.Check.ge(0)])
    cols["expiry"] = pa.Column(pl.Date, nullable=False)
    schema = pa.DataFrameSchema(
        cols,
        checks=[
            pa.Check(_ohlc_consistent, name="ohlc_consistent"),
            pa.Check(
                _increasing_within(["root", "publisher_id"]), name="ts_event_increasing_per_root"
            ),
            pa.Check(
                _unique_over(["root", "ts_event", "publisher_id"]),
                name="unique_root_ts_event_publisher_id",
            ),
        ],
        strict=True,
        name="continuous_bars",
    )
    return _with_screen(schema, "root", None, None)


@dataclass(frozen=True)
class ValidationResult:
    passed: bool
    n_failed_rows: int
    failures: pl.DataFrame  # check, column, row, value; first ``max_failures`` rows
    message: str

    def raise_if_failed(self) -> None:
        if not self.passed:
            raise ValueError(self.message)


FAILURE_SCHEMA = {"check": pl.String, "column": pl.String, "row": pl.Int64, "value": pl.String}


def _failure_table(frame: pl.DataFrame, schema: pa.DataFrameSchema) -> pl.DataFrame | None:
    """pandera's failure cases as (check, column, row, value), or None when all pass."""
    if screen_passes(frame, schema):
        return None
    try:
        schema.validate(frame, lazy=True)
    except SchemaErrors as exc:
        cases = exc.failure_cases
    except SchemaError as exc:  # non-lazy paths (e.g. wrong frame type)
        cases = pl.DataFrame(
            {
                "check": [str(exc.check)],
                "column": [None],
                "index": [None],
                "failure_case": [str(exc)],
            }
        )
    else:
        return None
    return cases.select(
        pl.col("check").cast(pl.String),
        pl.col("column").cast(pl.String),
        pl.col("index").cast(pl.Int64).alias("row"),
        pl.col("failure_case").cast(pl.String).alias("value"),
    )


def _summarise(
    name: str,
    schema: pa.DataFrameSchema,
    height: int,
    table: pl.DataFrame | None,
    max_failures: int,
) -> ValidationResult:
    if table is None or table.height == 0:
        empty = pl.DataFrame(schema=FAILURE_SCHEMA)
        return ValidationResult(True, 0, empty, f"{name}: {height} rows pass {schema.name}")
    table = table.sort("row", nulls_last=False)
    n_rows = table["row"].drop_nulls().n_unique()
    by_check = table.group_by("check", maintain_order=True).len().sort("len", descending=True)
    summary = ", ".join(f"{c} ({n})" for c, n in by_check.iter_rows())
    first_rows = table["row"].drop_nulls().unique(maintain_order=True).head(5).to_list()
    msg = f"{name}: {n_rows} of {height} rows fail {schema.name}; failed checks: {summary}" + (
        f"; first failing rows: {first_rows}" if first_rows else ""
    )
    return ValidationResult(False, n_rows, table.head(max_failures), msg)


def validate_frame(
    df: pl.DataFrame | pl.LazyFrame,
    schema: pa.DataFrameSchema,
    *,
    max_failures: int = 20,
    label: str | None = None,
) -> ValidationResult:
    """Validate lazily (all checks run) and summarise: failing row count + first failures."""
    frame = df.collect() if isinstance(df, pl.LazyFrame) else df
    table = _failure_table(frame, schema)
    return _summarise(label or schema.name or "frame", schema, frame.height, table, max_failures)


class StreamValidator:
    """Validate a table fed in order, batch by batch, so memory stays at one batch.

    Exact for tables in contract order (raw_bars: sorted by instrument_id, ts_event;
    continuous_bars: by root, ts_event), where a duplicate key or a step back in time
    sits next to its neighbour: each batch is validated with the previous batch's last
    row in front of it, so no pair across a batch boundary goes unchecked. Row numbers
    in the result are positions in the whole table.
    """

    def __init__(
        self,
        schema: pa.DataFrameSchema,
        *,
        max_failures: int = 20,
        label: str | None = None,
        batch_rows: int = 524_288,
    ):
        self.schema = schema
        self.max_failures = max_failures
        self.label = label or schema.name or "frame"
        self._tables: list[pl.DataFrame] = []
        self._frame_level: set[tuple[str | None, str | None]] = set()
        self._prev: pl.DataFrame | None = None
        self._schema_probe: pl.DataFrame | None = None
        self._pending: list[pl.DataFrame] = []
        self._pending_rows = 0
        self.batch_rows = batch_rows
        self.height = 0

    def feed(self, frame: pl.DataFrame, constants: Mapping[str, str | None] | None = None) -> None:
        """Queue a batch; pandera runs once ``batch_rows`` rows are queued (its cost is
        mostly per call, so small batches are pooled).

        ``constants``: String columns, missing from ``frame``, with one value on every
        row. A batch that passes :func:`screen_passes` (previous row in front) is counted
        without them ever being built; any other is materialised and queued.
        """
        if constants:
            if self._schema_probe is None:
                self._schema_probe = self._materialise(frame.head(0), constants)
            if frame.height == 0:
                return
            if not self._pending:
                joined = (
                    frame if self._prev is None else pl.concat([self._prev[frame.columns], frame])
                )
                if screen_passes(joined, self.schema, constants):
                    self.height += frame.height
                    self._prev = self._materialise(frame.tail(1), constants)
                    return
            frame = self._materialise(frame, constants)
        if self._schema_probe is None:
            self._schema_probe = frame.head(0)
        if frame.height == 0:
            return
        self._pending.append(frame)
        self._pending_rows += frame.height
        if self._pending_rows >= self.batch_rows:
            self._flush()

    def _materialise(
        self, frame: pl.DataFrame, constants: Mapping[str, str | None]
    ) -> pl.DataFrame:
        cols = [pl.lit(v, pl.String).alias(k) for k, v in constants.items()]
        order = [c for c in self.schema.columns if c in frame.columns or c in constants]
        return frame.with_columns(cols).select(order)

    def _flush(self) -> None:
        if not self._pending:
            return
        frame = (
            self._pending[0]
            if len(self._pending) == 1
            else pl.concat(self._pending, how="vertical_relaxed")
        )
        self._pending, self._pending_rows = [], 0
        lead = 0 if self._prev is None else 1
        joined = (
            frame if self._prev is None else pl.concat([self._prev, frame], how="vertical_relaxed")
        )
        table = _failure_table(joined, self.schema)
        if table is not None:
            # the carried-over row's own failures were reported with its batch; keep them
            # anyway (a duplicate pair names both rows) and de-duplicate at the end
            rows = table.filter(pl.col("row").is_not_null())
            self._tables.append(rows.with_columns(pl.col("row") + (self.height - lead)))
            for check, column, _, value in table.filter(pl.col("row").is_null()).iter_rows():
                if (check, column) not in self._frame_level:
                    self._frame_level.add((check, column))
                    self._tables.append(
                        pl.DataFrame(
                            [(check, column, None, value)], schema=FAILURE_SCHEMA, orient="row"
                        )
                    )
        self.height += frame.height
        self._prev = frame.tail(1)

    def result(self) -> ValidationResult:
        self._flush()
        tables = list(self._tables)
        if self.height == 0 and self._schema_probe is not None:
            table = _failure_table(self._schema_probe, self.schema)
            tables = [table] if table is not None else []
        merged = (
            pl.concat(tables).unique(["check", "column", "row"], maintain_order=True)
            if tables
            else None
        )
        return _summarise(self.label, self.schema, self.height, merged, self.max_failures)


def validate_parquet(
    path: str | Path,
    schema: pa.DataFrameSchema,
    *,
    batch_rows: int = 262_144,
    max_failures: int = 20,
    label: str | None = None,
) -> ValidationResult:
    """Validate a parquet file in bounded memory (see :class:`StreamValidator`)."""
    pf = pq.ParquetFile(path)
    name = label or f"{schema.name} ({Path(path).name})"
    v = StreamValidator(schema, max_failures=max_failures, label=name, batch_rows=batch_rows)
    v.feed(pl.from_arrow(pf.schema_arrow.empty_table()))  # type: ignore[arg-type]
    for batch in pf.iter_batches(batch_size=batch_rows):
        frame = pl.from_arrow(batch)
        assert isinstance(frame, pl.DataFrame)
        v.feed(frame)
    return v.result()
