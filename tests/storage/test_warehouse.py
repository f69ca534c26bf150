"""Warehouse layout, atomic writes and the DuckDB catalogue."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from urllib.parse import unquote

import duckdb
import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from foxhunt_pipeline.ingest.decode import RAW_BARS_POLARS_SCHEMA, ingest_dbn_file
from foxhunt_pipeline.storage import warehouse as wh
from tests.dbn_fixtures import es_day_file


@pytest.mark.parametrize(
    "key",
    [
        "glbx-mdp3-20240103.ohlcv-1m.dbn.zst",
        "my file (2).dbn",
        "données→é.dbn.zst",
        "a/b\\c%20.dbn",
    ],
)
def test_partition_path_is_one_safe_directory(key: str, tmp_path: Path) -> None:
    p = wh.raw_bars_partition_path(tmp_path, key)
    assert p.name == "data.parquet" and p.parent.parent == tmp_path / "raw_bars"
    part = p.parent.name
    assert part.startswith("source_file=") and "/" not in part and " " not in part
    assert unquote(part.removeprefix("source_file=")) == key
    p.parent.mkdir(parents=True)
    assert p.parent.is_dir()


def test_partition_keys_do_not_collide(tmp_path: Path) -> None:
    keys = ["a b", "a%20b", "a+b", "a/b", "a_b"]
    assert len({wh.raw_bars_partition_path(tmp_path, k) for k in keys}) == len(keys)
    with pytest.raises(ValueError):
        wh.raw_bars_partition_path(tmp_path, "")


def test_scan_with_no_partitions_is_empty_with_schema(tmp_path: Path) -> None:
    lf = wh.scan_raw_bars(tmp_path / "nothing")
    df = lf.collect()
    assert df.height == 0 and df.schema == RAW_BARS_POLARS_SCHEMA


def _land(tmp_path: Path, name: str, day: date) -> Path:
    src = es_day_file(tmp_path / "landing" / name, day, n=5)
    ingest_dbn_file(src, wh.raw_bars_partition_path(tmp_path / "wh", name))
    return src


def test_scan_reads_all_partitions_with_source_file(tmp_path: Path) -> None:
    _land(tmp_path, "one day.dbn.zst", date(2024, 1, 3))
    _land(tmp_path, "zwei→tag.dbn.zst", date(2024, 1, 4))
    df = wh.scan_raw_bars(tmp_path / "wh").collect()
    assert df.schema == RAW_BARS_POLARS_SCHEMA
    assert df.group_by("source_file").len().sort("source_file").rows() == [
        ("one day.dbn.zst", 10),
        ("zwei→tag.dbn.zst", 10),
    ]


def test_write_parquet_atomic_replaces_and_keeps_types(tmp_path: Path) -> None:
    path = tmp_path / "t" / "data.parquet"
    df = pl.DataFrame({"ts": [1, 2], "s": ["a", "b"]}).with_columns(
        pl.col("ts").cast(pl.Datetime("ns", "UTC"))
    )
    wh.write_parquet_atomic(df, path)
    wh.write_parquet_atomic(df.head(1), path)
    assert pl.read_parquet(path).equals(df.head(1))
    assert str(pq.read_schema(path).field("ts").type) == "timestamp[ns, tz=UTC]"
    assert [p.name for p in path.parent.iterdir()] == ["data.parquet"]


def test_write_failure_mid_way_keeps_previous_version(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "data.parquet"
    old = pl.DataFrame({"x": [1, 2, 3]})
    wh.write_parquet_atomic(old, path)

    def half_then_fail(table, where, **kw):
        where.write(b"PAR1 partial garbage")  # the buffered stream onto the temp file
        where.flush()
        raise KeyboardInterrupt("killed mid-write (simulated)")

    monkeypatch.setattr(pq, "write_table", half_then_fail)
    with pytest.raises(KeyboardInterrupt):
        wh.write_parquet_atomic(pl.DataFrame({"x": [9]}), path)
    monkeypatch.undo()
    assert pl.read_parquet(path).equals(old)
    assert [p.name for p in tmp_path.iterdir()] == ["data.parquet"]


def _wide_frame(n: int = 50) -> pl.DataFrame:
    """A features-like frame: keys, strings, floats (one with NaN and null), an int, a bool."""
    rng = np.random.default_rng(0)
    f = rng.standard_normal((n, 3)).astype(np.float32)
    return pl.DataFrame({
        "ts_event": pl.datetime_range(datetime(2024, 1, 2, tzinfo=UTC), datetime(2024, 1, 2, tzinfo=UTC)
                                      + timedelta(minutes=n - 1), "1m", eager=True).dt.cast_time_unit("ns"),
        "root": ["ES"] * n, "symbol": ["ESH4"] * n, "contract_seq": np.arange(n, dtype=np.int32) // 10,
        "is_filled": np.arange(n) % 3 == 0,
        "f_a": f[:, 0], "f_b": np.where(np.arange(n) == 3, np.nan, f[:, 1]).astype(np.float32),
        "y_1": pl.Series(f[:, 2]).scatter(5, None), "close": rng.standard_normal(n),
    })


def test_warehouse_parquet_reads_back_equal_everywhere_without_float_statistics(tmp_path: Path) -> None:
    """Every warehouse file: the values read back bit for bit (polars, pyarrow, DuckDB);
    min/max statistics on the keys (readers skip files by time, root, contract), none on
    floats; dictionaries on strings only; one buffered write, no temp file left."""
    df = _wide_frame()
    path = tmp_path / "features" / "trade_date=2024-01-02" / "data.parquet"
    wh.write_parquet_atomic(df, path)
    assert pl.read_parquet(path).equals(df, null_equal=True)
    assert pl.from_arrow(pq.read_table(path)).equals(df, null_equal=True)
    assert str(pq.read_schema(path).field("ts_event").type) == "timestamp[ns, tz=UTC]"
    assert str(pq.read_schema(path).field("root").type) == "string"
    con = duckdb.connect()
    try:
        got = pl.from_arrow(con.sql(f"select * from read_parquet('{path}', hive_partitioning=false) order by ts_event").to_arrow_table())
    finally:
        con.close()
    assert got.with_columns(pl.col("ts_event").dt.convert_time_zone("UTC")).equals(df, null_equal=True)
    meta = pq.ParquetFile(path).metadata.row_group(0)
    cols = {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}
    assert {n for n, c in cols.items() if c.is_stats_set} == {"ts_event", "root", "symbol", "contract_seq",
                                                               "is_filled"}
    assert cols["ts_event"].statistics.min == df["ts_event"].min()
    assert {n for n, c in cols.items() if c.has_dictionary_page} == {"root", "symbol"}
    assert {c.compression for c in cols.values()} == {"ZSTD"}
    assert [p.name for p in path.parent.iterdir()] == ["data.parquet"]


def test_a_file_of_the_previous_writer_options_still_reads(tmp_path: Path) -> None:
    """Files written before (pyarrow's defaults: statistics on every column, 1,024-row
    batches, unbuffered) read as before through the warehouse readers."""
    from upath import UPath

    from foxhunt_pipeline.storage import trade_dates

    df = _wide_frame()
    root = UPath(tmp_path)
    old = trade_dates.date_dir(root, "features", date(2024, 1, 2)) / "data.parquet"
    Path(old.parent.path).mkdir(parents=True)
    pq.write_table(wh.plain_strings(df), old.path, compression="zstd")
    new = trade_dates.write_part(root, "features", date(2024, 1, 3), df)
    assert pq.ParquetFile(old.path).metadata.row_group(0).column(5).is_stats_set  # f_a, the old way
    assert not pq.ParquetFile(new.path).metadata.row_group(0).column(5).is_stats_set
    both = trade_dates.read_dates(root, "features")
    assert both.equals(pl.concat([df, df]), null_equal=True)


def test_plain_strings_casts_only_the_string_columns() -> None:
    df = _wide_frame().with_columns(pl.col("symbol").cast(pl.Categorical).alias("cat"))
    t = wh.plain_strings(df)
    assert [str(f.type) for f in t.schema] == [
        "timestamp[ns, tz=UTC]", "string", "string", "int32", "bool", "float", "float", "float", "double",
        str(df.select("cat").to_arrow().schema.field("cat").type)]
    assert pl.from_arrow(t).equals(df, null_equal=True)


def test_duckdb_views_only_for_existing_tables(tmp_path: Path) -> None:
    db_path = tmp_path / "foxhunt.duckdb"
    assert wh.refresh_duckdb_views(db_path, tmp_path / "wh") == []
    _land(tmp_path, "f 1.dbn.zst", date(2024, 1, 3))
    assert wh.refresh_duckdb_views(db_path, tmp_path / "wh") == ["raw_bars"]
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        n, sf = con.execute("select count(*), min(source_file) from raw_bars").fetchone()
        views = {
            r[0]
            for r in con.execute(
                "select view_name from duckdb_views() where not internal"
            ).fetchall()
        }
    finally:
        con.close()
    assert (n, sf) == (10, "f 1.dbn.zst") and views == {"raw_bars"}


def test_duckdb_continuous_view_and_rolls_table_replaced(tmp_path: Path) -> None:
    db_path, w = tmp_path / "foxhunt.duckdb", tmp_path / "wh"
    # 23:30 UTC on Jan 2 is 17:30 CT: the session of trade date Jan 3
    cont = pl.DataFrame({"ts_event": [datetime(2024, 1, 2, 23, 30, tzinfo=UTC)], "root": ["ES"], "x": [1.0]}
                        ).with_columns(pl.col("ts_event").dt.cast_time_unit("ns"))
    wh.write_parquet_atomic(cont, wh.table_path(w, "continuous_bars"))
    rolls = pl.DataFrame(
        {
            "root": ["ES"],
            "roll_date": [date(2024, 3, 7)],
            "from_symbol": ["ESH4"],
            "to_symbol": ["ESM4"],
            "rule": ["volume"],
        }
    )
    assert wh.refresh_duckdb_views(db_path, w, rolls=rolls) == ["continuous_bars"]
    wh.refresh_duckdb_views(db_path, w, rolls=rolls.head(0))
    wh.refresh_duckdb_views(db_path, w, rolls=rolls)  # replaced, not appended
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        got = con.execute("select root, roll_date, to_symbol from rolls").fetchall()
        cols = con.execute("select root, x, trade_date from continuous_bars").fetchall()
    finally:
        con.close()
    assert got == [("ES", date(2024, 3, 7), "ESM4")] and cols == [("ES", 1.0, date(2024, 1, 3))]


def test_append_duckdb_table_creates_then_appends(tmp_path: Path) -> None:
    db_path = tmp_path / "x.duckdb"
    row = pl.DataFrame({"model": ["tft"], "sharpe": [0.5]})
    assert wh.append_duckdb_table(db_path, "model_evaluations", row) == 1
    assert (
        wh.append_duckdb_table(
            db_path, "model_evaluations", row.with_columns(pl.lit("dqn").alias("model"))
        )
        == 2
    )
    con = duckdb.connect(str(db_path))
    try:
        assert con.execute("select model from model_evaluations order by model").fetchall() == [
            ("dqn",),
            ("tft",),
        ]
    finally:
        con.close()
    with pytest.raises(ValueError):
        wh.append_duckdb_table(db_path, "bad name; drop", row)


def test_append_adds_new_columns_and_keeps_old_rows(tmp_path: Path) -> None:
    """A home written before model_evaluations grew fold / protocol_id / ic stays appendable."""
    db_path = tmp_path / "x.duckdb"
    wh.append_duckdb_table(db_path, "model_evaluations",
                           pl.DataFrame({"model": ["foxhunt-tft"], "sharpe": [0.5]}))
    new = pl.DataFrame({"model": ["foxhunt-tft"], "sharpe": [None], "fold": ["pooled"],
                        "protocol_id": ["abc"], "ic": [0.1]},
                       schema_overrides={"sharpe": pl.Float64})
    assert wh.append_duckdb_table(db_path, "model_evaluations", new) == 2
    con = duckdb.connect(str(db_path))
    try:
        got = con.execute("select sharpe, fold, protocol_id, ic from model_evaluations "
                          "order by fold nulls first").fetchall()
    finally:
        con.close()
    assert got == [(0.5, None, None, None), (None, "pooled", "abc", 0.1)]


def test_partition_directory_names_are_bounded_and_short_ones_unchanged(tmp_path):
    from urllib.parse import quote

    from foxhunt_pipeline.storage.warehouse import partition_dir_name

    short = "glbx mdp3 é 20240103.ohlcv-1m.dbn"
    assert partition_dir_name(short) == f"source_file={quote(short, safe='')}"  # homes keep their layout
    long_a = "é" * 120 + "-a.dbn.zst"  # 250 bytes: a legal file name, 3x that when encoded
    long_b = "é" * 120 + "-b.dbn.zst"
    a, b = partition_dir_name(long_a), partition_dir_name(long_b)
    assert a != b and len(a.encode()) <= 200 and a.startswith("source_file=%C3%A9")
    assert partition_dir_name(long_a) == a  # stable
    d = wh.raw_bars_partition_path(tmp_path, long_a)
    d.parent.mkdir(parents=True)  # OSError: File name too long before
    d.write_bytes(b"x")
