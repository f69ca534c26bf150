"""pandera contracts: every rule fails on the row that breaks it, and says so."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import polars as pl
import pytest

from foxhunt_pipeline.contracts.schemas import (
    continuous_bars_schema,
    raw_bars_schema,
    validate_frame,
)
from foxhunt_pipeline.ingest.decode import DbnInputError, ingest_dbn_file
from foxhunt_pipeline.instruments.rolls import build_continuous
from tests.dbn_fixtures import NS, day_ns, es_day_file

DAY = date(2024, 1, 3)
START, END = day_ns(DAY), day_ns(DAY) + 86400 * NS


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> pl.DataFrame:
    d = tmp_path_factory.mktemp("raw")
    ingest_dbn_file(es_day_file(d / "f.dbn.zst", DAY, n=12), d / "o.parquet")
    return pl.read_parquet(d / "o.parquet")


def set_cell(df: pl.DataFrame, row: int, col: str, value) -> pl.DataFrame:
    idx = pl.int_range(pl.len())
    return df.with_columns(
        pl.when(idx == row).then(pl.lit(value, df.schema[col])).otherwise(pl.col(col)).alias(col)
    )


def test_clean_frame_passes(raw: pl.DataFrame) -> None:
    r = validate_frame(raw, raw_bars_schema(START, END))
    assert r.passed and r.n_failed_rows == 0 and r.failures.height == 0
    assert validate_frame(raw.lazy(), raw_bars_schema()).passed


def test_crossed_bar_fails_and_names_row(raw: pl.DataFrame) -> None:
    bad = set_cell(raw, 5, "high", float(raw["low"][5]) - 1.0)  # high below low
    r = validate_frame(bad, raw_bars_schema(START, END))
    assert not r.passed and r.n_failed_rows == 1
    assert r.failures.filter(pl.col("check") == "ohlc_consistent")["row"].to_list() == [5]
    assert "ohlc_consistent" in r.message and "[5]" in r.message


def test_close_outside_range_fails(raw: pl.DataFrame) -> None:
    bad = set_cell(raw, 2, "close", float(raw["high"][2]) + 0.25)
    r = validate_frame(bad, raw_bars_schema())
    assert r.failures["row"].to_list() == [2]


@pytest.mark.parametrize(
    ("value", "check"),
    [
        (None, "not_nullable"),
        (float("nan"), "finite"),
        (float("inf"), "finite"),
        (-1.0, "greater_than(0)"),
    ],
)
def test_bad_prices_fail(raw: pl.DataFrame, value, check: str) -> None:
    bad = set_cell(raw, 7, "open", value)
    r = validate_frame(bad, raw_bars_schema())
    assert not r.passed
    rows = r.failures.filter(pl.col("column") == "open")
    assert set(rows["row"]) == {7} and check in rows["check"].to_list()


def test_undef_price_rows_from_a_dbn_file_fail_the_check(tmp_path: Path) -> None:
    from tests.dbn_fixtures import Instrument, encode_dbn, make_records, write_dbn

    recs = make_records(100, START, 4)
    recs["low"][2] = 2**63 - 1  # UNDEF_PRICE
    raw_bytes = encode_dbn(
        recs,
        start_ns=START,
        end_ns=END,
        instruments=[Instrument(100, "ESH4", date(2024, 1, 1), date(2024, 3, 16))],
    )
    ingest_dbn_file(write_dbn(tmp_path / "u.dbn", raw_bytes), tmp_path / "o.parquet")
    r = validate_frame(pl.read_parquet(tmp_path / "o.parquet"), raw_bars_schema(START, END))
    assert not r.passed and r.n_failed_rows == 1
    assert r.failures.filter(pl.col("column") == "low")["row"].to_list() == [2]


def test_duplicate_keys_fail(raw: pl.DataFrame) -> None:
    bad = pl.concat([raw, raw[3:4]])
    r = validate_frame(bad, raw_bars_schema())
    dup_rows = r.failures.filter(pl.col("check").str.starts_with("unique"))["row"].to_list()
    assert sorted(dup_rows) == [3, raw.height]


def test_non_increasing_timestamps_fail(raw: pl.DataFrame) -> None:
    swapped = pl.concat([raw[:4], raw[5:6], raw[4:5], raw[6:]])
    r = validate_frame(swapped, raw_bars_schema())
    inc = r.failures.filter(pl.col("check") == "ts_event_increasing_per_instrument")
    assert inc["row"].to_list() == [5]


def test_ts_outside_metadata_range_fails(raw: pl.DataFrame) -> None:
    first = int(raw["ts_event"].to_physical().min())
    r = validate_frame(raw, raw_bars_schema(first + 1, END))
    rows = r.failures.filter(pl.col("check") == "ts_event_in_metadata_range")["row"].to_list()
    expected = raw.with_row_index().filter(pl.col("ts_event").to_physical() == first)["index"]
    assert rows == expected.to_list() and rows
    r_end = validate_frame(raw, raw_bars_schema(START, first))  # end is exclusive
    assert r_end.n_failed_rows == raw.height


def test_wrong_timestamp_dtype_fails(raw: pl.DataFrame) -> None:
    bad = raw.with_columns(pl.col("ts_event").dt.cast_time_unit("us"))
    r = validate_frame(bad, raw_bars_schema())
    assert not r.passed and "ts_event" in r.failures["column"].to_list()


def test_missing_column_fails(raw: pl.DataFrame) -> None:
    r = validate_frame(raw.drop("root"), raw_bars_schema())
    assert not r.passed and "root" in r.message + " ".join(r.failures["value"].drop_nulls())


def test_failures_table_is_capped(raw: pl.DataFrame) -> None:
    bad = raw.with_columns(pl.lit(-1.0).alias("open"))
    r = validate_frame(bad, raw_bars_schema(), max_failures=20)
    assert r.n_failed_rows == raw.height and r.failures.height == 20
    assert set(r.failures.columns) == {"check", "column", "row", "value"}


def test_continuous_schema_on_built_series(tmp_path: Path) -> None:
    d = tmp_path
    for i, day in enumerate([date(2024, 1, 3), date(2024, 1, 4)]):
        ingest_dbn_file(es_day_file(d / f"{i}.dbn.zst", day, n=8), d / f"p{i}" / "data.parquet")
    cont, _ = build_continuous(pl.scan_parquet(sorted(d.glob("p*/data.parquet"))))
    assert validate_frame(cont, continuous_bars_schema()).passed
    bad = set_cell(cont, 1, "contract_seq", -1)
    assert validate_frame(bad, continuous_bars_schema()).failures["row"].to_list() == [1]


def test_dbn_error_is_a_value_error() -> None:
    assert issubclass(DbnInputError, ValueError)


def test_validate_parquet_matches_whole_frame_across_batch_boundaries(
    raw: pl.DataFrame, tmp_path: Path
) -> None:
    from foxhunt_pipeline.contracts.schemas import validate_parquet

    bad = raw.sort("instrument_id", "ts_event")
    bad = pl.concat([bad[:5], bad[4:5], bad[5:]])  # duplicate of row 4 at row 5
    bad = set_cell(bad, 9, "low", 1e9)  # crossed bar
    bad = set_cell(bad, 17, "close", None)
    path = tmp_path / "bad.parquet"
    bad.write_parquet(path)
    whole = validate_frame(bad, raw_bars_schema(START, END))
    for batch_rows in (5, 4, 3, 1000):  # 5: the duplicate pair straddles the boundary
        part = validate_parquet(path, raw_bars_schema(START, END), batch_rows=batch_rows)
        assert part.n_failed_rows == whole.n_failed_rows == 4
        key = ["row", "check", "column"]
        assert part.failures.sort(key).select(key).equals(whole.failures.sort(key).select(key))
    assert validate_parquet(path, raw_bars_schema(), batch_rows=5).failures["row"].max() == 17


def test_validate_parquet_on_clean_and_empty_files(raw: pl.DataFrame, tmp_path: Path) -> None:
    from foxhunt_pipeline.contracts.schemas import validate_parquet

    raw.write_parquet(tmp_path / "ok.parquet")
    assert validate_parquet(
        tmp_path / "ok.parquet", raw_bars_schema(START, END), batch_rows=7
    ).passed
    raw.head(0).write_parquet(tmp_path / "empty.parquet")
    assert validate_parquet(tmp_path / "empty.parquet", raw_bars_schema()).passed
    raw.head(0).drop("root").write_parquet(tmp_path / "wrong.parquet")
    assert not validate_parquet(tmp_path / "wrong.parquet", raw_bars_schema()).passed


def test_increasing_check_on_interleaved_instruments(raw: pl.DataFrame) -> None:
    inter = raw.sort("ts_event", "instrument_id")  # groups not contiguous: windowed path
    assert inter["instrument_id"][0] != inter["instrument_id"][1]
    assert validate_frame(inter, raw_bars_schema()).passed
    order = list(range(inter.height))
    order[1], order[3] = 3, 1  # two bars of the same instrument swapped
    bad = inter[order]
    r = validate_frame(bad, raw_bars_schema())
    inc = r.failures.filter(pl.col("check") == "ts_event_increasing_per_instrument")
    assert inc["row"].to_list() == [3]
