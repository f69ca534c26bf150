"""The features table's contract as a pandera (polars) schema, and a validation report.

Blocking checks: exactly the declared columns; keys typed as in docs/contracts.md;
every ``f_*``, ``k_*``, ``s_*`` Float32, non-null and finite (the builder already dropped
the warm-up rows, so "after warm-up" is every row); every ``y_h`` Float32, finite where
present and null exactly at the last h rows of its stretch: a (root, contract_seq) cut
where the data has a hole, a missing session or an outage (``instruments.sessions``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandera.polars as pa
import polars as pl
from pandera.errors import SchemaError, SchemaErrors

from foxhunt_pipeline.instruments.sessions import new_stretch

KEY_DTYPES = {
    "ts_event": pl.Datetime("ns", "UTC"),
    "root": pl.String,
    "symbol": pl.String,
    "contract_seq": pl.Int32,
    "is_filled": pl.Boolean,
}
INPUT_PREFIXES = ("f_", "k_", "s_")


def _finite(data) -> pl.LazyFrame:
    return data.lazyframe.select(pl.col(data.key).is_finite().fill_null(False))


def _finite_or_null(data) -> pl.LazyFrame:
    return data.lazyframe.select(pl.col(data.key).is_null() | pl.col(data.key).is_finite())


def _targets_null_only_at_contract_end(targets: list[str]):
    def check(data) -> pl.LazyFrame:
        frame = data.lazyframe.select("root", "contract_seq", "ts_event").collect()
        seg = ["root", "contract_seq", "_stretch"]
        lf = data.lazyframe.with_columns(pl.Series("_stretch", np.cumsum(new_stretch(frame)), pl.Int32))
        to_end = pl.len().over(seg) - 1 - pl.int_range(pl.len()).over(seg)
        ok = [pl.col(y).is_null() == (to_end < int(y.split("_")[1])) for y in targets]
        return lf.select(pl.all_horizontal(ok).alias("targets_null_only_at_contract_end"))

    return check


def feature_schema(columns: Sequence[str]) -> pa.DataFrameSchema:
    """Schema for a features table with exactly ``columns`` (keys, f_*, k_*, s_*, y_*)."""
    cols: dict[str, pa.Column] = {}
    targets = []
    for c in columns:
        if c in KEY_DTYPES:
            cols[c] = pa.Column(KEY_DTYPES[c], nullable=False)
        elif c.startswith(INPUT_PREFIXES):
            cols[c] = pa.Column(pl.Float32, nullable=False, checks=pa.Check(_finite, name="finite"))
        elif c.startswith("y_") and c[2:].isdigit():
            targets.append(c)
            cols[c] = pa.Column(
                pl.Float32, nullable=True, checks=pa.Check(_finite_or_null, name="finite_or_null")
            )
        else:
            raise ValueError(f"column {c!r} is not part of the features contract")
    missing = [k for k in KEY_DTYPES if k not in cols]
    if missing:
        raise ValueError(f"features columns must include the keys {missing}")
    checks = [
        pa.Check(
            _targets_null_only_at_contract_end(targets), name="targets_null_only_at_contract_end"
        )
    ]
    return pa.DataFrameSchema(
        cols, checks=checks if targets else [], strict=True, ordered=False, name="features"
    )


@dataclass
class FeatureValidation:
    passed: bool
    n_failed_rows: int
    failures: pl.DataFrame  # pandera failure cases: column, check, index (row), failure_case
    message: str


def validate_features(df: pl.DataFrame, columns: Sequence[str] | None = None) -> FeatureValidation:
    """Run the blocking checks; never raises on bad data, reports which rows and why."""
    schema = feature_schema(list(columns) if columns is not None else df.columns)
    try:
        schema.validate(df, lazy=True)
    except (SchemaErrors, SchemaError) as err:
        fc = getattr(err, "failure_cases", None)
        failures = (
            fc if isinstance(fc, pl.DataFrame) else pl.DataFrame({"failure_case": [str(err)]})
        )
        rows = failures["index"].drop_nulls().n_unique() if "index" in failures.columns else 0
        if {"column", "check", "failure_case"} <= set(failures.columns):
            idx = pl.col("index") if "index" in failures.columns else pl.lit(None)
            summary = failures.group_by("column", "check", maintain_order=True).agg(
                pl.len(),
                pl.col("failure_case").first().alias("example"),
                idx.drop_nulls().head(3).alias("rows"),
            )
            lines = [
                f"{r['column']}: {r['check']} ({r['len']} cases, e.g. {r['example']!s:.80} at rows {r['rows']})"
                for r in summary.head(20).iter_rows(named=True)
            ]
        else:
            lines = [str(err)[:500]]
        msg = f"features failed validation: {rows} rows; " + "; ".join(lines)
        return FeatureValidation(False, int(rows), failures, msg)
    return FeatureValidation(
        True, 0, pl.DataFrame(), f"features passed: {df.height} rows, {df.width} columns"
    )
