"""Bad input is refused up front with a message naming the file and the reason, never
turned into wrong bars: other bar sizes, records whose rtype contradicts the header,
other datasets, unknown roots, implausible dates and impossible volumes (issue 18)."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from foxhunt_pipeline.ingest.decode import HOME_BAR_SCHEMAS, DbnInputError, ingest_dbn_file
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

DAY = date(2024, 1, 3)
ES = [Instrument(100, "ESH4", date(2024, 1, 1), date(2024, 3, 16))]


def _ingest(src: Path, tmp_path: Path, **kw):
    return ingest_dbn_file(src, tmp_path / "out.parquet", schemas=HOME_BAR_SCHEMAS, **kw)


@pytest.mark.parametrize(
    ("name", "schema"),
    [
        ("test_data.ohlcv-1h.v3.dbn.zst", "ohlcv-1h"),
        ("test_data.ohlcv-1d.v3.dbn.zst", "ohlcv-1d"),
        ("test_data.ohlcv-1s.v3.dbn.zst", "ohlcv-1s"),
    ],
)
def test_other_bar_sizes_are_refused_with_how_to_fix(tmp_path, name, schema):
    with pytest.raises(DbnInputError) as err:
        _ingest(shared_file(name), tmp_path)
    msg = str(err.value)
    assert name in msg and f"{schema} bars are not supported" in msg and "ohlcv-1m" in msg
    assert not (tmp_path / "out.parquet").exists()


def test_one_minute_bars_and_non_bar_schemas(tmp_path):
    report = _ingest(shared_file("test_data.ohlcv-1m.v3.dbn.zst"), tmp_path, validate=True)
    assert report.rows_out == 2 and report.validation.passed
    with pytest.raises(DbnInputError, match="'trades' is not a bar schema"):
        _ingest(shared_file("test_data.trades.v3.dbn.zst"), tmp_path)


def test_records_whose_rtype_contradicts_the_header_are_refused(tmp_path):
    # hourly records (rtype 34) in a file whose header says ohlcv-1m
    recs = make_records(100, day_ns(DAY) + 14 * 3600 * NS, 5, schema="ohlcv-1h")
    raw = encode_dbn(recs, start_ns=day_ns(DAY), end_ns=day_ns(DAY) + 86400 * NS,
                     instruments=ES, schema="ohlcv-1m")
    src = write_dbn(tmp_path / "mixed.ohlcv-1m.dbn", raw)
    with pytest.raises(DbnInputError, match=r"mixed.ohlcv-1m.dbn: 5 records are ohlcv-1h"):
        _ingest(src, tmp_path)
    assert not (tmp_path / "out.parquet").exists()


def test_another_dataset_is_refused(tmp_path):
    recs = make_records(100, day_ns(DAY) + 14 * 3600 * NS, 5)
    raw = encode_dbn(recs, start_ns=day_ns(DAY), end_ns=day_ns(DAY) + 86400 * NS,
                     instruments=ES, dataset="XNAS.ITCH")
    with pytest.raises(DbnInputError, match="dataset 'XNAS.ITCH' is not supported"):
        _ingest(write_dbn(tmp_path / "xnas.dbn", raw), tmp_path)


def test_unknown_root_is_refused_from_the_header_or_the_mapping(tmp_path):
    recs = make_records(100, day_ns(DAY) + 14 * 3600 * NS, 5, price=180.0)
    cattle = [Instrument(100, "LEG4", date(2024, 1, 1), date(2024, 3, 1))]
    raw = encode_dbn(recs, start_ns=day_ns(DAY), end_ns=day_ns(DAY) + 86400 * NS,
                     instruments=cattle, symbols=("LE.FUT",))
    with pytest.raises(DbnInputError, match=r"le.dbn: futures root\(s\) LE not in the instrument"):
        _ingest(write_dbn(tmp_path / "le.dbn", raw), tmp_path)
    # the header asks for ES but a mapped child is another product: refused while decoding
    raw = encode_dbn(recs, start_ns=day_ns(DAY), end_ns=day_ns(DAY) + 86400 * NS,
                     instruments=[Instrument(100, "KEH4", date(2024, 1, 1), date(2024, 3, 16))])
    with pytest.raises(DbnInputError, match="KEH4: futures root"):
        _ingest(write_dbn(tmp_path / "ke.dbn", raw), tmp_path)
    assert not (tmp_path / "out.parquet").exists()


@pytest.mark.parametrize("year", [1970, 1985, 2099])
def test_files_dated_outside_globex_history_are_refused(tmp_path, year):
    d = date(year, 1, 3)
    recs = make_records(100, day_ns(d) + 14 * 3600 * NS, 5)
    raw = encode_dbn(recs, start_ns=day_ns(d), end_ns=day_ns(d) + 86400 * NS,
                     instruments=[Instrument(100, "ESH4", date(year, 1, 1), date(year, 3, 16))])
    with pytest.raises(DbnInputError, match=f"implausible dates: the header says {year}-01-03"):
        _ingest(write_dbn(tmp_path / f"y{year}.dbn", raw), tmp_path)


def test_bars_past_tomorrow_fail_the_contract_when_the_header_has_no_end(tmp_path):
    recs = make_records(100, day_ns(DAY) + 14 * 3600 * NS, 5)
    recs["ts_event"][-1] = day_ns(date(2099, 1, 5))
    raw = encode_dbn(recs, start_ns=day_ns(DAY), end_ns=None,
                     instruments=[Instrument(100, "ESH4", date(2024, 1, 1), date(2100, 1, 1))])
    report = _ingest(write_dbn(tmp_path / "open-end.dbn", raw), tmp_path, validate=True)
    assert not report.validation.passed
    assert "ts_event_in_metadata_range" in report.validation.message
    assert "[4]" in report.validation.message


def test_a_volume_near_2_pow_64_fails_the_contract(tmp_path):
    src = es_day_file(tmp_path / "es.dbn", DAY)
    ok = _ingest(src, tmp_path, validate=True)
    assert ok.validation.passed
    recs = make_records(100, day_ns(DAY) + 14 * 3600 * NS, 10)
    recs["volume"][3] = np.uint64(2**64 - 7)  # a negative number written unsigned
    raw = encode_dbn(recs, start_ns=day_ns(DAY), end_ns=day_ns(DAY) + 86400 * NS, instruments=ES)
    report = _ingest(write_dbn(tmp_path / "wrap.dbn", raw), tmp_path, validate=True)
    assert not report.validation.passed
    assert "less_than_or_equal_to(1000000000)" in report.validation.message
    assert "[3]" in report.validation.message
    written = pl.read_parquet(tmp_path / "out.parquet")  # quarantined by the asset, not lost
    assert written["volume"][3] == 2**64 - 7


def test_conflicting_duplicates_in_a_file_are_counted_and_the_first_copy_kept(tmp_path):
    recs = make_records(100, day_ns(DAY) + 14 * 3600 * NS, 6)
    copy = recs[[1, 3, 3]].copy()  # a repeat of bar 1 and two of bar 3 ...
    copy["close"][1:] += 2 * NS  # ... whose second and third copies disagree
    copy["high"][1:] += 2 * NS
    raw = encode_dbn(np.concatenate([recs, copy]), start_ns=day_ns(DAY),
                     end_ns=day_ns(DAY) + 86400 * NS, instruments=ES)
    report = _ingest(write_dbn(tmp_path / "dup.dbn", raw), tmp_path, validate=True)
    assert report.validation.passed and report.rows_out == 6
    assert (report.duplicates_dropped, report.conflicting_duplicates) == (3, 2)
    warning = next(w for w in report.warnings if "disagree" in w)
    assert warning.startswith("dup.dbn: 2 duplicate bars") and "instrument 100 at 2024-01-03T14:03" in warning
    out = pl.read_parquet(tmp_path / "out.parquet")
    assert out["close"].to_list() == (recs["close"] / 1e9).tolist()  # first copies kept


def test_bars_with_volume_0_are_named_and_a_file_of_nothing_else_fails_its_contract(tmp_path):
    """An OHLCV bar exists only where something traded (issue 39): bars with volume 0 are
    named per file and root (and kept out of the volume roll); a file of nothing else is not
    a file of trades and fails its contract (the asset quarantines it)."""
    recs = make_records(100, day_ns(DAY) + 14 * 3600 * NS, 10)
    recs["volume"][[2, 5, 6]] = 0
    raw = encode_dbn(recs, start_ns=day_ns(DAY), end_ns=day_ns(DAY) + 86400 * NS, instruments=ES)
    report = _ingest(write_dbn(tmp_path / "some-zero.dbn", raw), tmp_path, validate=True)
    assert report.validation.passed and report.rows_out == 10
    assert report.zero_volume == {"ES": 3}
    assert ("some-zero.dbn: 3 ES bar(s) with volume 0 (an OHLCV bar exists only where something traded): "
            "kept out of the volume roll") in report.warnings
    recs["volume"][:] = 0
    raw = encode_dbn(recs, start_ns=day_ns(DAY), end_ns=day_ns(DAY) + 86400 * NS, instruments=ES)
    report = _ingest(write_dbn(tmp_path / "all-zero.dbn", raw), tmp_path, validate=True)
    assert not report.validation.passed and report.validation.n_failed_rows == 10
    assert "all-zero.dbn" in report.validation.message and "every one of its 10 bars has volume 0" in report.validation.message
    assert not any("volume 0" in w for w in report.warnings)  # said once, by the contract
