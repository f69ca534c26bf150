"""DBN -> raw_bars: real Databento test files (v1-v3), crafted parent-symbology files,
and every kind of bad input the landing zone can receive."""

from __future__ import annotations

import hashlib
import os
import warnings
from datetime import date
from pathlib import Path

import databento as db
import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from foxhunt_pipeline.ingest import decode as dbn_decode
from foxhunt_pipeline.ingest.decode import (
    RAW_BARS_ARROW_SCHEMA,
    DbnInputError,
    ingest_dbn_file,
    read_metadata,
    spread_ids_from_definitions,
)
from tests.dbn_fixtures import (
    NS,
    Instrument,
    day_ns,
    encode_dbn,
    es_day_file,
    make_records,
    shared_file,
    write_dbn,
)

REAL_BAR_FILES = [
    f"test_data.ohlcv-{s}.{v}"
    for s in ("1s", "1m", "1h")
    for v in ("v1.dbn.zst", "v2.dbn.zst", "v3.dbn.zst", "dbn")
]


def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("name", REAL_BAR_FILES)
def test_real_files_match_dbnstore(name: str, tmp_path: Path) -> None:
    src = shared_file(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = db.DBNStore.from_file(src).to_df(price_type="float", pretty_ts=True, map_symbols=True)
    report = ingest_dbn_file(src, tmp_path / "out.parquet")
    out = pl.read_parquet(tmp_path / "out.parquet")
    assert out.schema == dbn_decode.RAW_BARS_POLARS_SCHEMA
    assert report.rows_in == len(ref) == out.height == report.rows_out
    assert report.dbn_version == read_metadata(src).dbn_version
    assert out["ts_event"].to_physical().to_list() == ref.index.as_unit("ns").asi8.tolist()
    for c in ("open", "high", "low", "close"):
        np.testing.assert_allclose(out[c].to_numpy(), ref[c].to_numpy(), rtol=0, atol=1e-9)
    assert out["volume"].to_list() == ref["volume"].tolist()
    assert out["symbol"].to_list() == ref["symbol"].tolist()
    assert set(out["root"]) == {"ES"}
    assert set(out["source_file"]) == {name}


def test_versions_decode_identically(tmp_path: Path) -> None:
    frames = []
    for v in ("v1.dbn.zst", "v2.dbn.zst", "v3.dbn.zst", "dbn"):
        ingest_dbn_file(shared_file(f"test_data.ohlcv-1m.{v}"), tmp_path / f"{v}.parquet")
        frames.append(pl.read_parquet(tmp_path / f"{v}.parquet").drop("source_file"))
    assert all(f.equals(frames[0]) for f in frames[1:])


def test_report_carries_metadata(tmp_path: Path) -> None:
    src = shared_file("test_data.ohlcv-1h.v3.dbn.zst")
    r = ingest_dbn_file(src, tmp_path / "o.parquet")
    meta = read_metadata(src)
    assert (r.schema, r.dataset, r.dbn_version) == ("ohlcv-1h", "GLBX.MDP3", 3)
    assert r.start_ns == meta.start_ns and r.end_ns == meta.end_ns
    assert r.start.value == meta.start_ns  # ns-exact pandas Timestamp
    assert r.symbols == ["ESH1"]
    # Databento's sample holds two bars of a day its header covers whole: it reads as cut short
    assert [w for w in r.warnings if "looks truncated" not in w] == [] and len(r.warnings) == 1
    assert r.as_metadata()["rows_out"] == 2


@pytest.mark.parametrize(
    "name",
    ["test_data.ohlcv-1d.v1.dbn.zst", "test_data.ohlcv-1d.v3.dbn.zst", "test_data.ohlcv-1d.dbn"],
)
def test_zero_record_file_gives_empty_partition_and_warning(name: str, tmp_path: Path) -> None:
    r = ingest_dbn_file(shared_file(name), tmp_path / "o.parquet")
    assert r.rows_in == r.rows_out == 0
    assert any("0 records" in w for w in r.warnings)
    t = pq.read_table(tmp_path / "o.parquet")
    assert t.num_rows == 0 and t.schema.equals(RAW_BARS_ARROW_SCHEMA, check_metadata=False)


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("test_data.mbo.v3.dbn.zst", "'mbo'"),
        ("test_data.mbo.dbn", "'mbo'"),
        ("test_data.trades.v2.dbn.zst", "'trades'"),
        ("test_data.definition.v3.dbn.zst", "'definition'"),
        ("test_data.tbbo.v1.dbn.zst", "'tbbo'"),
        ("test_data.ohlcv-1m.dbz", "legacy DBZ"),
        ("test_data.mbo.dbz", "legacy DBZ"),
        ("test_data.definition.v1.dbn.frag", "not a DBN file"),
        ("test_data.definition.dbn.frag.zst", "no DBN metadata header"),
        ("multi-frame.definition.v1.dbn.frag.zst", "no DBN metadata header"),
    ],
)
def test_undecodable_or_wrong_schema_files_name_file_and_problem(
    name: str, fragment: str, tmp_path: Path
) -> None:
    with pytest.raises(DbnInputError) as err:
        ingest_dbn_file(shared_file(name), tmp_path / "o.parquet")
    assert fragment in str(err.value) and name in str(err.value)
    assert not (tmp_path / "o.parquet").exists() and leftovers(tmp_path) == []


def _good_zst(tmp_path: Path, n: int = 5000) -> Path:
    recs = make_records(100, day_ns(date(2024, 1, 3)), n, schema="ohlcv-1s")
    raw = encode_dbn(
        recs,
        start_ns=day_ns(date(2024, 1, 3)),
        end_ns=day_ns(date(2024, 1, 4)),
        instruments=[Instrument(100, "ESH4", date(2024, 1, 1), date(2024, 3, 16))],
        schema="ohlcv-1s",
    )
    return write_dbn(tmp_path / "good.dbn.zst", raw)


@pytest.mark.parametrize("cut", [0.05, 0.5, 0.98])
def test_truncated_zstd_is_an_error(cut: float, tmp_path: Path) -> None:
    data = _good_zst(tmp_path).read_bytes()
    bad = tmp_path / "cut.dbn.zst"
    bad.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(DbnInputError, match=r"cut\.dbn\.zst: truncated"):
        ingest_dbn_file(bad, tmp_path / "o.parquet")


def test_corrupt_zstd_is_an_error(tmp_path: Path) -> None:
    data = bytearray(_good_zst(tmp_path).read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 64):
        data[i] ^= 0x5A
    bad = tmp_path / "bad.dbn.zst"
    bad.write_bytes(bytes(data))
    with pytest.raises(DbnInputError, match=r"bad\.dbn\.zst: corrupt"):
        ingest_dbn_file(bad, tmp_path / "o.parquet")


def test_truncated_uncompressed_dbn_is_an_error(tmp_path: Path) -> None:
    data = shared_file("test_data.ohlcv-1m.dbn").read_bytes()
    bad = tmp_path / "short.dbn"
    bad.write_bytes(data[:-20])
    with pytest.raises(DbnInputError, match="truncated DBN data"):
        ingest_dbn_file(bad, tmp_path / "o.parquet")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"", "empty file"),
        (b"ts_event,open\n1,2\n" * 20, "not a DBN file"),
        (b"DBN\x03garbage", "DBN"),
    ],
)
def test_not_dbn_files(content: bytes, fragment: str, tmp_path: Path) -> None:
    p = tmp_path / "x.dbn"
    p.write_bytes(content)
    with pytest.raises(DbnInputError, match=fragment):
        ingest_dbn_file(p, tmp_path / "o.parquet")
    with pytest.raises(DbnInputError):
        read_metadata(p)


def test_parent_symbology_drops_spreads_and_maps_children(tmp_path: Path) -> None:
    src = es_day_file(tmp_path / "glbx-mdp3-20240103.ohlcv-1m.dbn.zst", date(2024, 1, 3), n=20)
    r = ingest_dbn_file(src, tmp_path / "o.parquet")
    out = pl.read_parquet(tmp_path / "o.parquet")
    assert r.rows_in == 60 and r.spreads_dropped == 20 and r.rows_out == out.height == 40
    assert out.group_by("instrument_id", "symbol").len().sort("instrument_id").rows() == [
        (100, "ESH4", 20),
        (200, "ESM4", 20),
    ]
    assert set(out["root"]) == {"ES"}
    # sorted by (instrument_id, ts_event) even though the file is time-interleaved
    assert out.equals(out.sort("instrument_id", "ts_event"))


def test_symbol_mapping_is_per_date_and_unmapped_rows_are_dropped(tmp_path: Path) -> None:
    d0, d1 = date(2024, 3, 14), date(2024, 3, 15)
    recs = np.concatenate(
        [
            make_records(7, day_ns(d0) + 15 * 3600 * NS, 3),
            make_records(7, day_ns(d1) + 15 * 3600 * NS, 3),
            make_records(8, day_ns(d1) + 15 * 3600 * NS, 2),
        ]
    )
    raw = encode_dbn(
        recs,
        start_ns=day_ns(d0),
        end_ns=day_ns(d1) + 86400 * NS,
        instruments=[Instrument(7, "ESH4", d0, d1), Instrument(7, "ESM4", d1, date(2024, 3, 16))],
    )
    src = write_dbn(tmp_path / "two days.dbn.zst", raw)
    r = ingest_dbn_file(src, tmp_path / "o.parquet")
    out = pl.read_parquet(tmp_path / "o.parquet")
    assert out["symbol"].to_list() == ["ESH4"] * 3 + ["ESM4"] * 3
    assert r.unmapped_dropped == 2 and any("instrument_id(s) 8" in w for w in r.warnings)


def test_undef_price_becomes_null_not_a_price(tmp_path: Path) -> None:
    recs = make_records(100, day_ns(date(2024, 1, 3)), 5)
    recs["high"][1] = dbn_decode.UNDEF_PRICE
    recs["open"][3] = dbn_decode.UNDEF_PRICE
    raw = encode_dbn(
        recs,
        start_ns=day_ns(date(2024, 1, 3)),
        end_ns=None,
        instruments=[Instrument(100, "ESH4", date(2024, 1, 1), date(2024, 3, 16))],
    )
    r = ingest_dbn_file(write_dbn(tmp_path / "u.dbn", raw), tmp_path / "o.parquet")
    out = pl.read_parquet(tmp_path / "o.parquet")
    assert r.undef_price_rows == 2 and r.end_ns is None
    assert out["high"].is_null().to_list() == [False, True, False, False, False]
    assert out["open"].is_null().to_list() == [False, False, False, True, False]
    assert out.select(pl.max_horizontal("open", "high", "low", "close").max()).item() < 1e6


def test_duplicates_dropped_and_unsorted_input_sorted(tmp_path: Path) -> None:
    base = make_records(100, day_ns(date(2024, 1, 3)), 6)
    other_pub = make_records(100, day_ns(date(2024, 1, 3)), 2, publisher_id=2)
    recs = np.concatenate([base[3:], base[:4], other_pub])  # out of order, row 3 twice
    raw = encode_dbn(
        recs,
        start_ns=day_ns(date(2024, 1, 3)),
        end_ns=None,
        instruments=[Instrument(100, "ESH4", date(2024, 1, 1), date(2024, 3, 16))],
    )
    r = ingest_dbn_file(
        write_dbn(tmp_path / "d.dbn.zst", raw), tmp_path / "o.parquet", chunk_records=3
    )
    out = pl.read_parquet(tmp_path / "o.parquet")
    assert r.duplicates_dropped == 1 and out.height == 8 == r.rows_out
    assert out.select("ts_event", "publisher_id").is_duplicated().sum() == 0
    assert out["ts_event"].is_sorted()


def test_chunk_size_does_not_change_output(tmp_path: Path) -> None:
    src = es_day_file(tmp_path / "es.dbn.zst", date(2024, 1, 3), n=50)
    ingest_dbn_file(src, tmp_path / "a.parquet", chunk_records=7)
    ingest_dbn_file(src, tmp_path / "b.parquet", chunk_records=1_000_000)
    assert pl.read_parquet(tmp_path / "a.parquet").equals(pl.read_parquet(tmp_path / "b.parquet"))


@pytest.mark.parametrize("name", ["with space 2024.ohlcv-1m.dbn.zst", "données ES é→ü.dbn.zst"])
def test_odd_file_names(name: str, tmp_path: Path) -> None:
    src = es_day_file(tmp_path / "in" / name, date(2024, 1, 3), n=4)
    out = tmp_path / "out dir é" / "data.parquet"
    r = ingest_dbn_file(src, out)
    assert r.rows_out == 8 and set(pl.read_parquet(out)["source_file"]) == {name}


def test_landed_file_is_never_touched(tmp_path: Path) -> None:
    src = es_day_file(tmp_path / "landing" / "f.dbn.zst", date(2024, 1, 3))
    before = (sha256(src), src.stat().st_mtime_ns, sorted(os.listdir(src.parent)))
    ingest_dbn_file(src, tmp_path / "wh" / "o.parquet")
    read_metadata(src)
    assert (sha256(src), src.stat().st_mtime_ns, sorted(os.listdir(src.parent))) == before
    # and a failing ingest (wrong schema) neither
    mbo = shared_file("test_data.mbo.v3.dbn.zst")
    digest = sha256(mbo)
    with pytest.raises(DbnInputError):
        ingest_dbn_file(mbo, tmp_path / "wh" / "x.parquet")
    assert sha256(mbo) == digest


def test_failed_write_leaves_previous_dest_and_no_temp(tmp_path: Path, monkeypatch) -> None:
    src = es_day_file(tmp_path / "f.dbn.zst", date(2024, 1, 3), n=10)
    dest = tmp_path / "wh" / "data.parquet"
    ingest_dbn_file(src, dest)
    previous = pl.read_parquet(dest)

    calls = {"n": 0}
    real = pq.ParquetWriter.write_batch

    def boom(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 2:  # after the first instrument was written
            raise OSError("disk full (simulated)")
        return real(self, *a, **k)

    monkeypatch.setattr(pq.ParquetWriter, "write_batch", boom)
    src2 = es_day_file(tmp_path / "g.dbn.zst", date(2024, 1, 4), n=10)
    with pytest.raises(OSError, match="simulated"):
        ingest_dbn_file(src2, dest)
    assert calls["n"] == 2
    assert pl.read_parquet(dest).equals(previous)
    assert leftovers(dest.parent) == []


def test_failed_decode_leaves_previous_dest(tmp_path: Path) -> None:
    dest = tmp_path / "data.parquet"
    ingest_dbn_file(shared_file("test_data.ohlcv-1m.v3.dbn.zst"), dest)
    before = dest.read_bytes()
    with pytest.raises(DbnInputError):
        ingest_dbn_file(shared_file("test_data.trades.v3.dbn.zst"), dest)
    assert dest.read_bytes() == before and leftovers(tmp_path) == []


def test_definitions_distinguish_spreads(tmp_path: Path) -> None:
    spreads, symbols = spread_ids_from_definitions([shared_file("test_data.definition.v3.dbn.zst")])
    assert symbols and all(isinstance(k, int) for k in symbols)
    assert spreads == set()  # MSFT is a stock, not a spread
    with pytest.raises(DbnInputError, match="expected a definition file"):
        spread_ids_from_definitions([shared_file("test_data.ohlcv-1m.v3.dbn.zst")])


def test_inline_validation_matches_validating_the_written_file(tmp_path: Path) -> None:
    from foxhunt_pipeline.contracts.schemas import raw_bars_schema, validate_frame

    start = day_ns(date(2024, 1, 3))
    recs = np.concatenate(
        [
            make_records(100, start, 40, schema="ohlcv-1s"),
            make_records(200, start, 40, schema="ohlcv-1s"),
        ]
    )
    recs["high"][5] = recs["low"][5] - NS  # crossed bar, instrument 100
    recs["close"][60] = dbn_decode.UNDEF_PRICE  # instrument 200
    raw = encode_dbn(
        recs, start_ns=start, end_ns=start + 86400 * NS, schema="ohlcv-1s",
        instruments=[Instrument(100, "ESH4", date(2024, 1, 1), date(2024, 3, 16)),
                     Instrument(200, "ESM4", date(2024, 1, 1), date(2024, 6, 22))],
    )  # fmt: skip
    src = write_dbn(tmp_path / "bad bars.dbn.zst", raw)
    r = ingest_dbn_file(src, tmp_path / "o.parquet", validate=True, row_group_rows=16)
    assert r.validation is not None and not r.validation.passed
    whole = validate_frame(pl.read_parquet(tmp_path / "o.parquet"), raw_bars_schema(r.start, r.end))
    assert r.validation.n_failed_rows == whole.n_failed_rows == 2
    assert (
        sorted(set(r.validation.failures["row"])) == sorted(set(whole.failures["row"])) == [5, 60]
    )
    assert "bad bars.dbn.zst" in r.validation.message
    good = ingest_dbn_file(
        shared_file("test_data.ohlcv-1m.v2.dbn.zst"), tmp_path / "g.parquet", validate=True
    )
    assert good.validation is not None and good.validation.passed
    empty = ingest_dbn_file(
        shared_file("test_data.ohlcv-1d.v3.dbn.zst"), tmp_path / "e.parquet", validate=True
    )
    assert empty.validation is not None and empty.validation.passed


def test_truncated_input_mid_stream_leaves_previous_dest(tmp_path: Path) -> None:
    dest = tmp_path / "wh" / "data.parquet"
    good = _good_zst(tmp_path, n=20_000)
    ingest_dbn_file(good, dest)
    before = dest.read_bytes()
    data = good.read_bytes()
    cut = tmp_path / "cut.dbn.zst"
    cut.write_bytes(data[: len(data) * 9 // 10])
    with pytest.raises(DbnInputError, match="truncated"):
        ingest_dbn_file(cut, dest, chunk_records=1000)  # fails after chunks were spilled
    assert dest.read_bytes() == before and leftovers(dest.parent) == []


@pytest.mark.parametrize("n_instruments", [1, 3, 12])  # 12: the sort path
def test_split_by_instrument_keeps_file_order(n_instruments: int) -> None:
    recs = np.concatenate([make_records(i + 1, i, 50) for i in range(n_instruments)])
    recs = recs[np.random.default_rng(1).permutation(len(recs))]
    parts = list(dbn_decode.split_by_instrument(recs))
    assert [iid for iid, _ in parts] == list(range(1, n_instruments + 1))
    for iid, part in parts:
        assert part.dtype == recs.dtype
        assert (part == recs[recs["instrument_id"] == iid]).all()


def test_spilling_to_disk_gives_the_same_partition(tmp_path: Path) -> None:
    """A zero memory budget sends every held instrument to disk: same rows, no leftovers."""
    src = es_day_file(tmp_path / "es.dbn.zst", date(2024, 1, 3), n=40)
    mem = ingest_dbn_file(src, tmp_path / "wh" / "m.parquet", chunk_records=9, validate=True)
    disk = ingest_dbn_file(
        src, tmp_path / "wh" / "d.parquet", chunk_records=9, validate=True, spill_memory_bytes=0
    )
    a, b = (
        pl.read_parquet(tmp_path / "wh" / "m.parquet"),
        pl.read_parquet(tmp_path / "wh" / "d.parquet"),
    )
    assert a.equals(b) and a.height == 80 and a["instrument_id"].unique().to_list() == [100, 200]
    assert a.select("instrument_id", "ts_event").equals(
        a.select("instrument_id", "ts_event").sort("*")
    )
    assert (mem.rows_out, mem.spreads_dropped) == (disk.rows_out, disk.spreads_dropped) == (80, 40)
    assert mem.validation and disk.validation and mem.validation.passed and disk.validation.passed
    assert leftovers(tmp_path / "wh") == []


@pytest.mark.parametrize("budget", [0, 1 << 30])
def test_out_of_order_held_instrument_is_sorted_and_deduplicated(
    budget: int, tmp_path: Path
) -> None:
    """Instrument 200 is held (not streamed); its records arrive shuffled with one repeat."""
    start = day_ns(date(2024, 1, 3))
    a = make_records(100, start, 20)
    b = make_records(200, start, 20, price=4850.0)
    b = np.concatenate([b[10:], b[:11]])  # b[10] twice, and out of order
    body = np.concatenate([a, b])
    raw = encode_dbn(
        body, start_ns=start, end_ns=start + 86400 * NS,
        instruments=[Instrument(100, "ESH4", date(2024, 1, 1), date(2024, 3, 16)),
                     Instrument(200, "ESM4", date(2024, 1, 1), date(2024, 6, 22))],
    )  # fmt: skip
    src = write_dbn(tmp_path / "u.dbn.zst", raw)
    r = ingest_dbn_file(
        src, tmp_path / "o.parquet", chunk_records=6, spill_memory_bytes=budget, validate=True
    )
    out = pl.read_parquet(tmp_path / "o.parquet")
    assert r.duplicates_dropped == 1 and out.height == 40 == r.rows_out
    assert out.equals(out.sort("instrument_id", "ts_event"))
    assert r.validation is not None and r.validation.passed


def test_truncated_second_zstd_frame_is_an_error(tmp_path: Path) -> None:
    """Files may be several zstd frames; a cut in a later frame is still caught."""
    import zstandard

    start = day_ns(date(2024, 1, 3))
    raw = encode_dbn(
        make_records(100, start, 2000), start_ns=start, end_ns=None,
        instruments=[Instrument(100, "ESH4", date(2024, 1, 1), date(2024, 3, 16))],
    )  # fmt: skip
    half = len(raw) // 2
    cctx = zstandard.ZstdCompressor()
    first, second = cctx.compress(raw[:half]), cctx.compress(raw[half:])
    whole = write_dbn(tmp_path / "two.dbn.zst", first + second, compress=False)
    ingest_dbn_file(whole, tmp_path / "o.parquet")
    assert pl.read_parquet(tmp_path / "o.parquet").height == 2000
    cut = write_dbn(tmp_path / "cut.dbn.zst", first + second[: len(second) // 2], compress=False)
    with pytest.raises(DbnInputError, match=r"cut\.dbn\.zst: truncated"):
        ingest_dbn_file(cut, tmp_path / "o2.parquet")
