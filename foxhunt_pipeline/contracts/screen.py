"""The screen: one vectorised polars pass that says when pandera is certain to pass.

pandera's cost is mostly per call (dozens of lazy queries per frame), so each contract
carries a screen in its metadata. A frame the screen passes is clean; any other frame
goes to pandera. The screen can only be too strict, never too lenient
(tests/contracts/test_schemas.py and tests/contracts/test_schema_screen.py check it against pandera).
"""

from __future__ import annotations

from collections.abc import Mapping

import pandera.polars as pa
import polars as pl

SCREEN_KEY = "screen"


def _signature(schema: pa.DataFrameSchema) -> tuple:
    """Everything pandera would check; a screen is only valid for the schema it was made for."""
    cols = tuple(
        (n, str(c.dtype), c.nullable, c.unique, tuple((k.name, k.error) for k in c.checks))
        for n, c in schema.columns.items()
    )
    frame = tuple((k.name, k.error) for k in schema.checks)
    return cols, frame, schema.strict, schema.unique, schema.coerce


def with_screen(
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
    if check.name == "less_than_or_equal_to":
        return (c <= stats["max_value"]).all()
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
