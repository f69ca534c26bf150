"""The blocking pandera check on the features table."""

from __future__ import annotations

from functools import lru_cache

import polars as pl
import pytest

from foxhunt_pipeline.features import build_features
from foxhunt_pipeline.features.schema import feature_schema, validate_features
from tests.features_fixtures import make_continuous


@lru_cache(maxsize=1)
def feats() -> pl.DataFrame:
    return build_features(make_continuous(days=2, roots=("ES", "ZN"), session_fraction=0.5))


def _set(df: pl.DataFrame, col: str, row: int, value) -> pl.DataFrame:
    dtype = df.schema[col]
    return df.with_columns(
        pl.when(pl.int_range(pl.len()) == row)
        .then(pl.lit(value, dtype=dtype))
        .otherwise(pl.col(col))
        .alias(col)
    )


def test_built_features_pass():
    r = validate_features(feats())
    assert r.passed, r.message
    assert r.n_failed_rows == 0


@pytest.mark.parametrize(
    ("col", "value", "check"),
    [
        ("f_ret_std_20", float("inf"), "finite"),
        ("s_log_tick_size", float("nan"), "finite"),
    ],
)
def test_non_finite_inputs_fail_naming_column_and_row(col, value, check):
    f = feats()
    r = validate_features(_set(f, col, 17, value))
    assert not r.passed
    assert r.n_failed_rows == 1
    hit = r.failures.filter(pl.col("column") == col)
    assert hit["index"].to_list()[0] == 17
    assert check in hit["check"].to_list()
    assert col in r.message


def test_target_null_in_the_middle_of_a_contract_fails():
    f = feats()
    r = validate_features(_set(f, "y_3", 40, None))
    assert not r.passed and r.n_failed_rows == 1
    assert "targets_null_only_at_contract_end" in r.message


def test_target_present_at_the_last_bar_of_a_contract_fails():
    f = feats()
    last = f.with_row_index("i").filter(pl.col("root") == "ES")["i"].max()
    r = validate_features(_set(f, "y_1", int(last), 0.0))
    assert not r.passed and "targets_null_only_at_contract_end" in r.message


def test_an_undeclared_column_fails():
    f = feats()
    r = validate_features(f.with_columns(k_extra=pl.lit(1.0, dtype=pl.Float32)), columns=f.columns)
    assert not r.passed and "k_extra" in r.message


def test_wrong_dtype_fails():
    r = validate_features(feats().with_columns(pl.col("f_ret_1b").cast(pl.Float64)))
    assert not r.passed and "f_ret_1b" in r.message


def test_schema_rejects_columns_outside_the_contract():
    with pytest.raises(ValueError, match="not part of the features contract"):
        feature_schema(["ts_event", "root", "symbol", "contract_seq", "is_filled", "price"])
