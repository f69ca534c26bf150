"""Validating frames and parquet files against a contract, summarised for people.

pandera's lazy errors become a failing-row count, a small failure table and one
message, which the blocking Dagster asset checks show as metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pandera.polars as pa
import polars as pl
import pyarrow.parquet as pq
from pandera.errors import SchemaError, SchemaErrors

from foxhunt_pipeline.contracts.screen import SCREEN_KEY, screen_passes


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
        # (key, builder) of a last row handed over by feed_passed, built on first use
        self._prev_lazy: tuple[tuple[object, int], Callable[[], pl.DataFrame]] | None = None
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
                self._schema_probe = self.materialise(frame.head(0), constants)
            if frame.height == 0:
                return
            if not self._pending:
                prev = self._prev_row()
                joined = frame if prev is None else pl.concat([prev[frame.columns], frame])
                if screen_passes(joined, self.schema, constants):
                    self.height += frame.height
                    self._prev = self.materialise(frame.tail(1), constants)
                    self._prev_lazy = None
                    return
            frame = self.materialise(frame, constants)
        if self._schema_probe is None:
            self._schema_probe = frame.head(0)
        if frame.height == 0:
            return
        self._pending.append(frame)
        self._pending_rows += frame.height
        if self._pending_rows >= self.batch_rows:
            self._flush()

    def feed_passed(
        self,
        n_rows: int,
        first_key: tuple[object, int],
        last_key: tuple[object, int],
        last_row: Callable[[], pl.DataFrame],
    ) -> bool:
        """Count a batch of ``n_rows`` that the caller has screened itself (every row passes
        the contract's row checks, and rows strictly increase in the screen's order within
        it), so nothing of it is built here. ``first_key``/``last_key``: (screen group
        value, ``ts_event`` ns) of its first and last rows; ``last_row``: builds its last
        row as a full frame, called only if a later batch needs it. Only the step from the
        previous batch is checked here. Returns False, counting nothing, when the batch
        cannot be taken this way (a batch is waiting for pandera, the step is out of order,
        or the schema has no screen): the caller then feeds it whole to :meth:`feed`."""
        spec = (self.schema.metadata or {}).get(SCREEN_KEY)
        if n_rows == 0 or self._pending or spec is None:
            return False
        prev = self._prev_key()
        if prev is not None and not (
            first_key[0] > prev[0] or (first_key[0] == prev[0] and first_key[1] > prev[1])  # type: ignore[operator]
        ):
            return False
        self.height += n_rows
        self._prev, self._prev_lazy = None, (last_key, last_row)
        return True

    def _prev_key(self) -> tuple[object, int] | None:
        if self._prev_lazy is not None:
            return self._prev_lazy[0]
        if self._prev is None:
            return None
        group = (self.schema.metadata or {})[SCREEN_KEY]["group"]
        return self._prev[group][0], int(self._prev["ts_event"].to_physical()[0])

    def _prev_row(self) -> pl.DataFrame | None:
        """The previous batch's last row, built now if it was handed over lazily."""
        if self._prev_lazy is not None:
            self._prev = self._prev_lazy[1]()
            self._prev_lazy = None
        return self._prev

    def materialise(
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
        prev = self._prev_row()
        lead = 0 if prev is None else 1
        joined = frame if prev is None else pl.concat([prev, frame], how="vertical_relaxed")
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
        self._prev, self._prev_lazy = frame.tail(1), None

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
