"""The trade-date partitioned data path: building day by day as files land equals building all
dates at once and the unpartitioned full rebuild (continuous_bars, features, training_dataset),
a new day reads only the raw files holding its dates, and a re-delivered file changes nothing."""

from __future__ import annotations

import shutil
from datetime import date

import duckdb
import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from upath import UPath

from foxhunt_pipeline.features import build_features, by_date
from foxhunt_pipeline.features.dataset import DatasetConfig, build_training_dataset
from foxhunt_pipeline.ingest.decode import ingest_dbn_file
from foxhunt_pipeline.instruments.rolls import build_continuous
from foxhunt_pipeline.storage import continuous_dates, object_store, trade_dates
from foxhunt_pipeline.storage.warehouse import raw_bars_partition_path
from foxhunt_pipeline.synthetic.generate import generate
from models.windows import ARRAYS

DATASET = DatasetConfig(lookback=16, horizon=5, fractions=(0.5, 0.35, 0.15))


@pytest.fixture(scope="module")
def landed(tmp_path_factory):
    """UTC-day DBN files of ES around ES's March 2024 roll (five UTC days, four trade
    dates), each decoded once into a raw_bars partition."""
    base = tmp_path_factory.mktemp("history")
    files = sorted(generate(base / "landing", days=5, roots=("ES",), start=date(2024, 3, 7), seed=3))
    raw = base / "raw"
    for f in files:
        ingest_dbn_file(f, raw_bars_partition_path(raw, f.name), source_file=f.name)
    return files, raw


def _land(raw, warehouse, name: str) -> None:
    src = raw_bars_partition_path(raw, name)
    dest = raw_bars_partition_path(warehouse, name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)


def _build(root: UPath, new_files: list[str]) -> None:
    """What ``foxhunt materialize`` does for newly ingested files: their dates, plus the stored
    date before them (its last targets), in one run."""
    days = continuous_dates.touched_dates(root, new_files)
    before = [d for d in trade_dates.stored_dates(root, continuous_dates.TABLE) if d < days[0]]
    continuous_dates.build_dates(root, days)
    by_date.build_dates(root, before[-1] if before else days[0], days[-1])


def _table(root: UPath, table: str) -> pl.DataFrame:
    return trade_dates.read_dates(root, table).sort("root", "ts_event")


def _dataset(root: UPath):
    closes = _table(root, continuous_dates.TABLE).select("ts_event", "root", "close")
    return build_training_dataset(_table(root, by_date.TABLE), DATASET, close_prices=closes)


def test_day_by_day_equals_all_at_once_and_the_full_rebuild(landed, tmp_path):
    files, raw = landed
    daily, whole = UPath(tmp_path / "daily"), UPath(tmp_path / "whole")
    for f in files:  # one landed file at a time
        _land(raw, daily.path, f.name)
        _build(daily, [f.name])
    for f in files:
        _land(raw, whole.path, f.name)
    _build(whole, [f.name for f in files])

    ref_cont, ref_rolls = build_continuous(object_store.scan_raw_bars(whole))
    assert ref_rolls.height >= 1  # the ES roll lies inside the data
    assert _table(daily, "continuous_bars").equals(ref_cont.sort("root", "ts_event"))
    assert _table(whole, "continuous_bars").equals(ref_cont.sort("root", "ts_event"))
    ref_feat = build_features(ref_cont).sort("root", "ts_event")
    assert ref_feat.height > 0
    assert _table(daily, "features").equals(ref_feat)
    assert _table(whole, "features").equals(ref_feat)

    a, b = _dataset(daily), _dataset(whole)
    assert a.meta == b.meta
    for split in a.splits:
        for name in (*ARRAYS, "window_starts"):
            np.testing.assert_array_equal(getattr(a.splits[split], name), getattr(b.splits[split], name))


def test_a_new_day_reads_only_the_raw_files_of_its_dates(landed, tmp_path, monkeypatch):
    files, raw = landed
    root = UPath(tmp_path / "w")
    for f in files[:-1]:
        _land(raw, root.path, f.name)
    _build(root, [f.name for f in files[:-1]])
    before = _table(root, "continuous_bars")

    read: list[str] = []
    real = object_store.read_parquet
    monkeypatch.setattr(object_store, "read_parquet",
                        lambda p, columns=None: read.append(str(p)) or real(p, columns))
    asked: list[date] = []  # every read of a date's raw rows (volume, bars, conflicts)
    real_day_raw, real_dates_raw = continuous_dates._day_raw, continuous_dates.dates_raw
    monkeypatch.setattr(continuous_dates, "_day_raw",
                        lambda r, sources, day: asked.append(day) or real_day_raw(r, sources, day))
    monkeypatch.setattr(continuous_dates, "dates_raw",  # a chunk of dates read at once
                        lambda r, index, days, *a: asked.extend(days) or real_dates_raw(r, index, days, *a))
    _land(raw, root.path, files[-1].name)
    new = continuous_dates.touched_dates(root, [files[-1].name])
    _build(root, [files[-1].name])
    raw_reads = {p for p in read if "/raw_bars/" in p}
    assert raw_reads == {str(raw_bars_partition_path(root.path, files[-1].name))}  # its date index only
    assert set(asked) == set(new)  # volume and bars of the new dates, nothing older
    after = _table(root, "continuous_bars")
    old_dates = pl.col("ts_event") < after.filter(
        pl.col("ts_event").dt.date() >= min(new))["ts_event"].min()
    assert after.filter(old_dates).height >= before.filter(old_dates).height > 0


def test_a_redelivered_file_adds_no_rows_and_moves_no_roll(landed, tmp_path):
    files, raw = landed
    root = UPath(tmp_path / "w")
    for f in files:
        _land(raw, root.path, f.name)
    _build(root, [f.name for f in files])
    cont, fronts = _table(root, "continuous_bars"), continuous_dates.read_fronts(root)
    volume = continuous_dates.daily_volumes(root, continuous_dates.raw_date_index(root))

    copy = raw_bars_partition_path(root.path, "again-" + files[2].name)
    copy.parent.mkdir(parents=True)
    shutil.copyfile(raw_bars_partition_path(raw, files[2].name), copy)
    _build(root, ["again-" + files[2].name])
    assert _table(root, "continuous_bars").equals(cont)
    assert continuous_dates.read_fronts(root).equals(fronts)
    again = continuous_dates.daily_volumes(root, continuous_dates.raw_date_index(root))
    assert again.drop("files").equals(volume.drop("files"))  # de-duplicated, not summed twice


def test_a_weekend_trade_date_belongs_to_the_friday_partition_and_a_span_starts_a_date_early(tmp_path):
    assert trade_dates.partition_key_of(date(2024, 3, 9)) == "2024-03-08"  # Saturday
    assert trade_dates.partition_key_of(date(2024, 3, 10)) == "2024-03-08"  # Sunday
    assert trade_dates.partition_key_of(date(2024, 3, 11)) == "2024-03-11"
    root = UPath(tmp_path)
    empty = pl.DataFrame({"ts_event": []})
    for d in (date(2024, 3, 7), date(2024, 3, 8)):
        trade_dates.write_part(root, continuous_dates.TABLE, d, empty)
    assert continuous_dates.rebuild_span(root, []) is None
    # the new Monday completes Friday's last targets: the run starts at Friday
    assert continuous_dates.rebuild_span(root, [date(2024, 3, 11)]) == ("2024-03-08", "2024-03-11")
    assert continuous_dates.rebuild_span(root, [date(2024, 3, 7)]) == ("2024-03-07", "2024-03-07")


def test_a_date_built_alone_flags_the_jumps_and_conflicts_of_a_full_build(landed, tmp_path):
    from foxhunt_pipeline.contracts.plausibility import price_jumps
    from foxhunt_pipeline.instruments.rolls import duplicate_conflicts, trade_date

    files, raw = landed
    root = UPath(tmp_path / "wh")
    for f in files:
        _land(raw, root.path, f.name)
    days = continuous_dates.all_dates(root)
    day = days[1]  # not the roll date: its first bar continues the segment of the date before
    # a bad print on the very first bar of ``day``: only the date before can warm it up
    index = continuous_dates.raw_date_index(root)
    source = index.filter(pl.col("trade_date") == day)["source"].sort()[0]
    bars = pl.read_parquet(UPath(source).path)
    first = bars.filter(trade_date(pl.col("ts_event")) == day)["ts_event"].min()
    at_first = pl.col("ts_event") == first
    bars = bars.with_columns(pl.when(at_first).then(pl.col("close") * 1.5).otherwise(pl.col("high")).alias("high"))
    bars.write_parquet(UPath(source).path)
    # and a second delivery of three of its bars with other prices
    copy = bars.filter(trade_date(pl.col("ts_event")) == day).head(3).with_columns(
        pl.col("close") + 0.25, pl.col("high") + 0.25, source_file=pl.lit("zz-copy.dbn.zst"))
    dest = raw_bars_partition_path(root.path, "zz-copy.dbn.zst")
    dest.parent.mkdir(parents=True)
    copy.write_parquet(dest)

    continuous_dates.build_dates(root, [d for d in days if d != day])
    alone = continuous_dates.build_dates(root, [day])

    ref, _ = build_continuous(object_store.scan_raw_bars(root))
    want = price_jumps(ref).filter(trade_date(pl.col("ts_event")) == day)
    assert want.height >= 1 and first in want["ts_event"].to_list()
    assert alone.jumps == want.height
    assert alone.first_jumps["ts_event"].to_list() == want["ts_event"].to_list()
    assert alone.conflicts == duplicate_conflicts(object_store.scan_raw_bars(root)).count == 3
    assert "3 duplicate bars disagree" in alone.conflicts_message


def test_one_read_of_a_date_gives_its_bars_conflicts_and_volume(landed, tmp_path):
    """``day_bars_and_conflicts`` (one read of a date's files) and ``day_volume`` (no
    de-duplication where no key repeats) equal ``day_bars``, ``day_conflicts`` and
    ``daily_volume(day_bars)``, with and without copies of bars that disagree."""
    from foxhunt_pipeline.instruments.rolls import daily_volume, trade_date

    files, raw = landed
    root = UPath(tmp_path / "wh")
    for f in files:
        _land(raw, root.path, f.name)

    def conflicts_of_every_date() -> int:
        index = continuous_dates.raw_date_index(root)
        count = 0
        for day in [*continuous_dates.all_dates(root), date(2020, 1, 2)]:  # and a date with no file
            bars, found = continuous_dates.day_bars_and_conflicts(root, index, day)
            assert bars.equals(continuous_dates.day_bars(root, index, day))
            want = continuous_dates.day_conflicts(root, index, day)
            assert found.count == want.count and found.first.equals(want.first)
            volume = continuous_dates.day_volume(root, index, day)
            assert volume.equals(daily_volume(continuous_dates.day_bars(root, index, day)))
            count += found.count
        return count

    assert conflicts_of_every_date() == 0
    day = continuous_dates.all_dates(root)[1]
    source = continuous_dates.raw_date_index(root).filter(pl.col("trade_date") == day)["source"].sort()[0]
    mine = pl.read_parquet(UPath(source).path).filter(trade_date(pl.col("ts_event")) == day).head(4)
    # a second delivery of four of its bars: three with other prices and volumes, one equal
    copy = pl.concat([mine.head(3).with_columns(pl.col("close") + 0.25, pl.col("volume") * 2), mine.tail(1)])
    dest = raw_bars_partition_path(root.path, "zz-copy.dbn.zst")
    dest.parent.mkdir(parents=True)
    copy.with_columns(source_file=pl.lit("zz-copy.dbn.zst")).write_parquet(dest)
    assert conflicts_of_every_date() == 3


def _spoil(root: UPath, day: date) -> None:
    """A bad print on the first bar of ``day`` (only the date before warms it up) and a second
    delivery of three of its bars with other prices."""
    from foxhunt_pipeline.instruments.rolls import trade_date

    index = continuous_dates.raw_date_index(root)
    source = index.filter(pl.col("trade_date") == day)["source"].sort()[0]
    bars = pl.read_parquet(UPath(source).path)
    at_first = pl.col("ts_event") == bars.filter(trade_date(pl.col("ts_event")) == day)["ts_event"].min()
    bars = bars.with_columns(pl.when(at_first).then(pl.col("close") * 1.5).otherwise(pl.col("high")).alias("high"))
    bars.write_parquet(UPath(source).path)
    copy = bars.filter(trade_date(pl.col("ts_event")) == day).head(3).with_columns(
        pl.col("close") + 0.25, pl.col("volume") * 2, source_file=pl.lit("zz-copy.dbn.zst"))
    dest = raw_bars_partition_path(root.path, "zz-copy.dbn.zst")
    dest.parent.mkdir(parents=True)
    copy.write_parquet(dest)


@pytest.mark.parametrize("size", [2, 3, 16])
def test_a_chunk_of_dates_built_at_once_equals_a_build_date_by_date(landed, tmp_path, monkeypatch, size):
    """Dates read, de-duplicated, joined and checked for jumps a chunk at a time store the
    same bytes and report the same as one date at a time: with a held-back date inside a
    chunk (the next date then warms up on the one before it), conflicting copies (volumes
    summed de-duplicated) and a date no file holds."""
    files, raw = landed
    built, stored = {}, {}
    for n in (1, size):
        root = UPath(tmp_path / f"chunk{n}")
        for f in files:
            _land(raw, root.path, f.name)
        days = continuous_dates.all_dates(root)
        _spoil(root, days[1])
        monkeypatch.setattr(continuous_dates, "CHUNK_DATES", n)
        built[n] = continuous_dates.build_dates(root, [*days, date(2024, 3, 16)])
        stored[n] = {p.relative_to(root.path): p.read_bytes()
                     for p in sorted((tmp_path / f"chunk{n}" / continuous_dates.TABLE).rglob("*.parquet"))}
        stored[n]["volume"] = continuous_dates.daily_volumes(root, continuous_dates.raw_date_index(root)).drop("files")
    one, many = built[1], built[size]
    assert list(one.blocked) == [days[1]] and one.conflicts == 3 and one.unknown == [date(2024, 3, 16)]
    assert stored[1].pop("volume").equals(stored[size].pop("volume"))
    assert stored[1] == stored[size] and len(stored[1]) == len(days) - 1
    for name in ("rows", "stale", "unknown", "conflicts", "jumps", "day_conflicts", "blocked", "notes"):
        assert getattr(one, name) == getattr(many, name), name
    for name in ("rolls", "first_conflicts", "first_jumps"):
        assert getattr(one, name).equals(getattr(many, name)), name


@pytest.mark.parametrize("multiple", [0.01, 3.0])  # 0.01: nearly every bar, its medians compared
def test_the_jumps_of_a_chunk_are_those_of_each_date_alone(landed, tmp_path, multiple):
    """``chunk_jumps`` (one call, the date before cut to its last bars) flags in each date the
    bars a check of the date alone, warmed up on the whole date before, flags, with the
    same true and typical ranges."""
    files, raw = landed
    root = UPath(tmp_path / "wh")
    for f in files:
        _land(raw, root.path, f.name)
    days = continuous_dates.all_dates(root)
    fronts = continuous_dates.build_dates(root, days) and continuous_dates.read_fronts(root)
    index = continuous_dates.raw_date_index(root)
    built = continuous_dates.chunk_frames(root, index, fronts, days)
    frames = [(day, built[day][0]) for day in days]
    for previous, chunk in ((None, frames), (frames[0][1], frames[1:])):
        got = continuous_dates.chunk_jumps(chunk, previous, multiple, 20)
        for tag, (day, frame) in enumerate(chunk):
            before = previous if tag == 0 else chunk[tag - 1][1]
            want = continuous_dates.day_jumps(frame, before, day, multiple, 20)
            assert got.filter(pl.col("pair") == tag).drop("pair").equals(want)
            assert want.height > 0 or multiple == 3.0
    assert continuous_dates.quiet_dates(frames, None, 0, 20) == set(days)


def test_a_failed_features_write_raises_from_the_build_and_leaves_no_writer(landed, tmp_path, monkeypatch):
    """The features of a date are written by a writer thread: its error is the build's, the
    dates it wrote are whole, and no thread or temp file is left behind."""
    import threading

    files, raw = landed
    root = UPath(tmp_path / "wh")
    for f in files:
        _land(raw, root.path, f.name)
    days = continuous_dates.all_dates(root)
    continuous_dates.build_dates(root, days)
    real = trade_dates.write_part

    def failing(r, table, day, frame, part="data", **kw):
        if day == days[1]:
            raise OSError("disk full (simulated)")
        return real(r, table, day, frame, part=part, **kw)

    monkeypatch.setattr(trade_dates, "write_part", failing)
    with pytest.raises(OSError, match="disk full"):
        by_date.build_dates(root, days[0], days[-1])
    assert not [t for t in threading.enumerate() if t.name.startswith("features-writer")]
    written = trade_dates.stored_dates(root, by_date.TABLE)
    assert days[1] not in written and days[0] in written
    assert not [p for p in (tmp_path / "wh" / "features").rglob("*") if p.name.startswith(".")]
    monkeypatch.undo()
    whole = UPath(tmp_path / "whole")
    for f in files:
        _land(raw, whole.path, f.name)
    continuous_dates.build_dates(whole, days)
    by_date.build_dates(whole, days[0], days[-1])
    for day in written:
        assert trade_dates.read_dates(root, by_date.TABLE, day, day).equals(
            trade_dates.read_dates(whole, by_date.TABLE, day, day))


def test_a_range_cut_out_of_a_segment_passes_the_contract_and_changes_nothing(landed, tmp_path):
    """Rebuilding dates in the middle of a contract (foxhunt materialize --from/--to): their
    last bars have targets from the next date, which the features contract must accept."""
    from foxhunt_pipeline.features.schema import validate_features

    files, raw = landed
    root = UPath(tmp_path / "wh")
    for f in files:
        _land(raw, root.path, f.name)
    _build(root, [f.name for f in files])
    before = _table(root, "features")
    days = trade_dates.stored_dates(root, by_date.TABLE)
    results = []
    # the first date: ESH4 trades on the next one too (the roll is two dates later)
    rows = by_date.build_dates(root, days[0], days[0],
                               validate=lambda f: results.append(validate_features(f)) or results[-1].passed)
    assert results and all(r.passed for r in results), [r.message for r in results]
    assert set(rows.rows) == {days[0]}
    assert _table(root, "features").equals(before)


def test_dates_years_apart_are_rebuilt_in_runs_that_plan_no_empty_partition(tmp_path):
    """Issue 24: a six-year hole made one run of ~1,600 empty trade-date partitions."""
    root = UPath(tmp_path)
    empty = pl.DataFrame({"ts_event": []})
    for d in (date(2013, 12, 19), date(2013, 12, 20)):
        trade_dates.write_part(root, continuous_dates.TABLE, d, empty)
    spans = continuous_dates.rebuild_spans(root, [date(2013, 12, 20), date(2020, 1, 2), date(2020, 1, 3)])
    assert spans == [("2013-12-19", "2013-12-20"), ("2020-01-02", "2020-01-03")]
    # the stored date before joins a cluster only when it is close enough to share its stretch
    assert continuous_dates.rebuild_spans(root, [date(2013, 12, 23)]) == [("2013-12-20", "2013-12-23")]
    assert continuous_dates.rebuild_spans(root, [date(2014, 3, 3)]) == [("2014-03-03", "2014-03-03")]


def test_late_data_that_moves_a_roll_leaves_stale_dates_until_they_are_rebuilt(tmp_path):
    from tests.instruments.test_continuous import raw_frame, weekdays

    d = weekdays(date(2024, 3, 4), 4)
    vols = [{"ESH4": 900, "ESM4": 90}, {"ESH4": 300, "ESM4": 600},  # ESM4 busier on d1: roll on d2
            {"ESH4": 100, "ESM4": 900}, {"ESH4": 50, "ESM4": 900}]
    root = UPath(tmp_path / "w")

    def land(i: int) -> None:
        dest = raw_bars_partition_path(root.path, f"{d[i]}.dbn")
        dest.parent.mkdir(parents=True)
        raw_frame([(d[i], vols[i])]).collect().write_parquet(dest)

    for i in (0, 2, 3):
        land(i)
    continuous_dates.build_dates(root, continuous_dates.all_dates(root))
    assert continuous_dates.stale_dates(root) == []
    land(1)  # the crossover day lands late: the roll moves a session earlier
    build = continuous_dates.build_dates(root, [d[1]])
    assert continuous_dates.stale_dates(root) == build.stale == [d[2]]
    continuous_dates.build_dates(root, build.stale)
    assert continuous_dates.stale_dates(root) == []
    ref, _ = build_continuous(object_store.scan_raw_bars(root))
    assert _table(root, "continuous_bars").equals(ref.sort("root", "ts_event"))


def test_features_dates_are_lz4_and_read_with_older_zstd_dates_by_duckdb(landed, tmp_path):
    """The features table trades bytes for write time (``by_date.COMPRESSION``); a warehouse
    whose older dates were written with zstd reads as one table, in polars and DuckDB."""
    files, raw = landed
    root = UPath(tmp_path / "w")
    for f in files:
        _land(raw, root.path, f.name)
    _build(root, [f.name for f in files])
    parts = trade_dates.date_parts(root, by_date.TABLE)
    codecs = {pq.ParquetFile(p.path).metadata.row_group(0).column(0).compression
              for ps in parts.values() for p in ps}
    assert codecs == {"LZ4"}
    expected = _table(root, by_date.TABLE)
    older = next(iter(parts.values()))[0]  # as a warehouse built before the change holds it
    object_store.write_parquet(pl.read_parquet(older.path), older, compression="zstd")
    assert pq.ParquetFile(older.path).metadata.row_group(0).column(0).compression == "ZSTD"
    assert _table(root, by_date.TABLE).equals(expected)
    glob = f"{root.path}/{by_date.TABLE}/*/*.parquet"
    with duckdb.connect() as con:
        got = con.execute(f"select count(*), sum(f_ret_1b) from read_parquet('{glob}')").fetchall()
    assert got[0][0] == expected.height
    assert got[0][1] == pytest.approx(expected["f_ret_1b"].sum(), rel=1e-6)  # float32 sums
