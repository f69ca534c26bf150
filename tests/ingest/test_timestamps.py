"""Timestamps are exact: what DBNStore decodes is what polars, pyarrow, DuckDB and pandas
read back from our parquet, to the nanosecond (the old system died on "Failed to cast
timestamp column")."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import databento as db
import duckdb
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from foxhunt_pipeline.ingest.decode import ingest_dbn_file
from foxhunt_pipeline.storage.warehouse import raw_bars_partition_path, refresh_duckdb_views
from tests.dbn_fixtures import NS, SAMPLE_DBN, Instrument, encode_dbn, make_records, write_dbn


def odd_ns_file(path: Path) -> Path:
    """Bars whose ts_event carry every nanosecond digit, across a DST change and a leap day,
    plus one close to the end of the datetime64[ns] range."""
    stamps = np.array(
        [
            1704153600_123456789,  # 2024-01-02
            1709164800_000000001,  # 2024-02-29 (leap day) + 1 ns
            1710054000_999999999,  # 2024-03-10 07:00 UTC: the US DST switch
            1710054001_000000000,
            9_000_000_000_987654321,  # 2255-03-14
        ],
        dtype=np.uint64,
    )
    recs = make_records(100, 0, len(stamps))
    recs["ts_event"] = stamps
    raw = encode_dbn(
        recs,
        start_ns=int(stamps[0]),
        end_ns=int(stamps[-1]) + NS,
        instruments=[Instrument(100, "ESH4", date(2024, 1, 1), date(2262, 1, 1))],
    )
    return write_dbn(path, raw)


def dbnstore_ns(src: Path) -> list[int]:
    return [int(x) for x in db.DBNStore.from_file(src).to_ndarray()["ts_event"]]


CASES = ["generated", "test_data.ohlcv-1s.v3.dbn.zst", "test_data.ohlcv-1h.v1.dbn.zst"]


@pytest.fixture(params=CASES)
def landed(request, tmp_path: Path) -> tuple[Path, Path, list[int]]:
    if request.param == "generated":
        src = odd_ns_file(tmp_path / "odd ns é.dbn.zst")
    else:
        src = SAMPLE_DBN / request.param
    dest = raw_bars_partition_path(tmp_path / "wh", src.name)
    ingest_dbn_file(src, dest, plausible_dates=False)  # 2255 is implausible on purpose
    return src, dest, dbnstore_ns(src)


def test_parquet_schema_is_ns_utc(landed) -> None:
    _, dest, _ = landed
    assert pq.read_schema(dest).field("ts_event").type == pa.timestamp("ns", tz="UTC")


def test_polars_reads_exact_instants(landed) -> None:
    _, dest, expected = landed
    ts = pl.read_parquet(dest)["ts_event"]
    assert ts.dtype == pl.Datetime("ns", "UTC")
    assert ts.to_physical().to_list() == expected
    lazy = pl.scan_parquet(dest).select(pl.col("ts_event").to_physical()).collect()
    assert lazy["ts_event"].to_list() == expected


def test_pyarrow_reads_exact_instants(landed) -> None:
    _, dest, expected = landed
    col = pq.read_table(dest).column("ts_event")
    assert col.type == pa.timestamp("ns", tz="UTC")
    assert col.cast(pa.int64()).to_pylist() == expected


def test_pandas_reads_exact_instants(landed) -> None:
    _, dest, expected = landed
    for kwargs in ({"engine": "pyarrow"}, {}):
        s = pd.read_parquet(dest, **kwargs)["ts_event"]
        assert str(s.dt.tz) == "UTC"
        assert s.dt.as_unit("ns").astype("int64").tolist() == expected


def test_duckdb_reads_exact_instants(landed, tmp_path: Path) -> None:
    _, dest, expected = landed
    con = duckdb.connect()
    try:
        got = con.execute("select epoch_ns(ts_event) from read_parquet(?) ", [str(dest)]).fetchall()
        typ = con.execute(
            "select typeof(ts_event) from read_parquet(?) limit 1", [str(dest)]
        ).fetchall()
    finally:
        con.close()
    assert [g[0] for g in got] == expected
    assert typ[0][0] == "TIMESTAMPTZ_NS"


def test_duckdb_view_over_warehouse_reads_exact_instants(landed, tmp_path: Path) -> None:
    _, dest, expected = landed
    db_path = tmp_path / "foxhunt.duckdb"
    refresh_duckdb_views(db_path, dest.parents[2])
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        got = con.execute(
            "select epoch_ns(ts_event) from raw_bars order by instrument_id, ts_event"
        ).fetchall()
        back = con.sql("select ts_event from raw_bars order by instrument_id, ts_event").pl()
    finally:
        con.close()
    assert [g[0] for g in got] == expected
    assert back["ts_event"].to_physical().to_list() == expected
