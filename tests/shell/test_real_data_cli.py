"""Real data as it comes (issue 24), read from what ``foxhunt materialize`` prints: real CME
minute bars (``tests/data/dbn``, see its MANIFEST) landed as they are, or moved and altered
one field at a time (``tests.real_dbn``), each showing one problem a user must be told about:
roots too thin for features, a file cut short, duplicates that disagree, rows dropped and why,
a thin front, a 1000x print, late data that moves a roll, a hole across a split."""

from __future__ import annotations

import shutil
from datetime import date

import dagster as dg
import duckdb
import numpy as np
import pytest

from foxhunt_pipeline.cli.instance import get_instance
from foxhunt_pipeline.cli.runner import materialize_selection
from foxhunt_pipeline.config.paths import FoxhuntPaths
from foxhunt_pipeline.synthetic.dbn_writer import FIXED_PRICE_SCALE, Mapping
from tests.dbn_fixtures import SAMPLE_DBN
from tests.real_dbn import JAN26, JULY, MAY, real_records, write_real

pytestmark = pytest.mark.slow

DATED = ["raw_bars", "continuous_bars", "features"]
ESU4, NQU4, ESM4 = 118, 4358, 5602


def _land(paths: FoxhuntPaths, *names: str) -> None:
    for n in names:
        shutil.copyfile(SAMPLE_DBN / n, paths.landing / n)


def _materialize(paths: FoxhuntPaths, selection=DATED) -> tuple[bool, str]:
    log: list[str] = []
    ok = materialize_selection(paths, list(selection), profile="fast", echo=log.append)
    return ok, "\n".join(log)


def _sql(paths: FoxhuntPaths, query: str) -> list[tuple]:
    with duckdb.connect(str(paths.duckdb), read_only=True) as con:
        return con.execute(query).fetchall()


def _warnings(text: str) -> list[str]:
    return [line.strip().removeprefix("warning: ") for line in text.splitlines()
            if line.strip().startswith("warning: ")]


def test_what_a_user_is_told_about_thin_cut_duplicated_and_broken_files(foxhunt_home):
    paths = FoxhuntPaths.from_env().ensure()
    _land(paths, MAY, JULY, JAN26)  # ES and NQ, 10-30 minutes each: far below the warm-up
    recs, _ = real_records(JULY)
    # the July file again a week later, its header still running to the end of the next day:
    # the records stop 22 open hours before it (a download cut at a record boundary)
    write_real(paths.landing / "cut-short.dbn.zst", shift_days=7,
               end_ns=int(np.datetime64("2024-07-10T00:00", "ns").astype(np.int64)))
    # a second delivery of the July day whose ESU4 volumes disagree with the first
    other = recs.copy()
    other["volume"][other["instrument_id"] == ESU4] += 7
    write_real(paths.landing / "zz-redelivered.dbn.zst", records=other)
    # the May file with one more ESM4 record dated 2099 (outside its header's range)
    may, _ = real_records(MAY)
    broken = np.concatenate([may, may[-1:]])
    broken["ts_event"][-1] = np.uint64(np.datetime64("2099-01-01T00:00", "ns").astype(np.int64))
    write_real(paths.landing / "with-2099-row.dbn.zst", MAY, records=broken)
    # early June (trade date 2024-06-03): ESU4's real bars, and the same bars as ESM4 (the
    # nearest expiry, so the first front) with one lot each: the series starts on a contract
    # nobody traded
    june = recs[recs["instrument_id"] == ESU4]
    thin = june.copy()
    thin["instrument_id"], thin["volume"] = ESM4, 1
    write_real(paths.landing / "thin-front.dbn.zst", shift_days=-29,
               records=np.sort(np.concatenate([june, thin]), order=["ts_event", "instrument_id"]),
               extra=[Mapping("ESM4", ESM4, date(2024, 6, 2), date(2024, 6, 4))])

    ok, text = _materialize(paths)
    said = _warnings(text)
    assert ok, text

    def one(*words: str) -> str:
        hits = [w for w in said if all(x in w for x in words)]
        assert hits, f"no warning with {words}:\n{text}"
        return hits[0]

    # each names root / file, dates and cause
    one("ES", "no features", "warm-up", "2024-07-02")
    one("NQ", "no features", "warm-up")
    one("cut-short.dbn.zst", "looks truncated", "2024-07-09T00:09", "2024-07-10T00:00", "ES")
    one("duplicate bars disagree", "ESU4", "2024-07-01 23:", f"{JULY} over zz-redelivered.dbn.zst")
    one("with-2099-row.dbn.zst", "outside the header's range", "2099-01-01")
    one("front ESM4", "ES", "2024-06-03", "ESU4")
    # the runs cover the dates with data, never the empty partitions of a hole
    runs = [line for line in text.splitlines() if line.startswith("[ok] continuous_bars")]
    assert runs and not any("2024-07-09 .. 2026-01-09" in r or "2024-05-09 .. 2024-07" in r for r in runs), text
    # and each partition's metadata is its own: its rows, not the run's
    instance = get_instance(paths)
    stored = dict(_sql(paths, "select strftime(trade_date, '%Y-%m-%d'), count(*) from continuous_bars group by 1"))
    for key in ("2024-05-09", "2024-07-02", "2026-01-09"):
        (record,) = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("continuous_bars"), asset_partitions=[key]),
            limit=1).records
        assert record.asset_materialization.metadata["rows"].value == stored[key], key


def test_a_1000x_print_holds_its_date_back_and_names_bar_root_and_file(foxhunt_home):
    paths = FoxhuntPaths.from_env().ensure()
    _land(paths, JULY)
    assert _materialize(paths)[0]
    before = _sql(paths, "select count(*), max(close) from continuous_bars where root = 'ES'")[0]
    # a late print of ESU4 one minute after the real ones, at 1000x the price
    recs, _ = real_records(JULY)
    last = recs[recs["instrument_id"] == ESU4][-1:].copy()
    last["ts_event"] += np.uint64(60 * 10**9)
    for c in ("open", "high", "low", "close"):
        last[c] = last[c] * 1000
    write_real(paths.landing / "late-print.dbn.zst", records=last,
               end_ns=int(last["ts_event"][0]) + 60 * 10**9)

    ok, text = _materialize(paths)
    assert not ok, text
    line = next(x for x in text.splitlines() if x.strip().startswith("continuous_bars.continuous_bars_price_jumps:"))
    spike = float(last["close"][0]) / FIXED_PRICE_SCALE
    assert "2024-07-02T00:10:00+00:00" in line and "ES" in line and "late-print.dbn.zst" in line, text
    # the date is not stored with the print: the previous version stays readable
    after = _sql(paths, "select count(*), max(close) from continuous_bars where root = 'ES'")[0]
    assert after == before and after[1] < spike / 100


def test_a_bad_print_holds_back_its_root_only_and_the_command_says_so_last(foxhunt_home):
    """ES's 1000x print lands with the day's real ES and NQ bars: NQ's bars of 2024-07-02 are
    stored all the same, ES's are not, and the command ends (exit 1) with one line naming
    what was held back."""
    paths = FoxhuntPaths.from_env().ensure()
    _land(paths, JULY)
    recs, _ = real_records(JULY)
    last = recs[recs["instrument_id"] == ESU4][-1:].copy()
    last["ts_event"] += np.uint64(60 * 10**9)
    for c in ("open", "high", "low", "close"):
        last[c] = last[c] * 1000
    write_real(paths.landing / "late-print.dbn.zst", records=last, end_ns=int(last["ts_event"][0]) + 60 * 10**9)

    ok, text = _materialize(paths)
    assert not ok, text
    assert text.splitlines()[-1] == ("held back (likely bad prints, not stored; see continuous_bars_price_jumps "
                                     "above): ES 2024-07-02; every other root and date is stored"), text
    stored = dict(_sql(paths, "select root, count(*) from continuous_bars where trade_date = '2024-07-02' group by 1"))
    assert stored == {"NQ": 30}, stored


def test_late_data_that_moves_a_roll_rebuilds_the_dates_after_it(foxhunt_home):
    paths = FoxhuntPaths.from_env().ensure()
    _land(paths, JULY, JAN26)  # ESU4 (2024) then ESH6 (2026): segments 0 and 1
    assert _materialize(paths)[0]
    # then Databento's ESH1 sample of 2020-12-28 lands: every later front is renumbered
    _land(paths, "test_data.ohlcv-1m.v3.dbn.zst")
    ok, text = _materialize(paths)
    assert ok, text
    segments = _sql(paths, "select contract_seq, list(distinct symbol order by symbol) from continuous_bars "
                           "where root = 'ES' group by 1 order by 1")
    assert [len(s) for _, s in segments] == [1] * len(segments) and len(segments) == 3, segments
    assert [s[0] for _, s in segments] == ["ESH1", "ESU4", "ESH6"]
    ok, again = _materialize(paths)
    assert ok and "every trade date is up to date" in again, again


def test_a_root_never_scored_and_a_split_across_a_hole_are_said(foxhunt_home):
    from foxhunt_pipeline.synthetic.generate import generate

    paths = FoxhuntPaths.from_env().ensure()
    generate(paths.landing, days=4, roots=("ES", "GC"), start=date(2024, 1, 2), seed=8)
    generate(paths.landing, days=4, roots=("ES",), start=date(2024, 1, 22), seed=9)  # GC stops
    ok, text = _materialize(paths, [*DATED, "training_dataset"])
    assert ok, text
    said = _warnings(text)
    assert any("GC has no test bars" in w for w in said), text
    assert any("hole" in w and "2024-01-05" in w and "2024-01-2" in w for w in said), text

