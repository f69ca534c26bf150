"""The incremental training dataset (issue 25): raw per-date blocks read back as the arrays
builder's dataset, a new date summarised alone, older layouts readable, and the features
path behind it (one file per date, each continuous_bars date read once per run)."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, date, datetime
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from upath import UPath

from foxhunt_pipeline.features import by_date, dataset_dates
from foxhunt_pipeline.features.dataset import DatasetConfig, build_training_dataset
from foxhunt_pipeline.ingest.decode import ingest_dbn_file
from foxhunt_pipeline.storage import continuous_dates, dataset_store, object_store, trade_dates
from foxhunt_pipeline.storage.warehouse import raw_bars_partition_path
from foxhunt_pipeline.synthetic.generate import generate
from models.windows import ARRAYS, LAYOUT, TrainingData

CFG = DatasetConfig(lookback=16, horizon=5, fractions=(0.5, 0.3, 0.2))


@pytest.fixture(scope="module")
def landed(tmp_path_factory):
    """UTC-day files of ES and ZN over ES's March 2024 roll, each decoded once."""
    base = tmp_path_factory.mktemp("dataset_dates")
    files = sorted(generate(base / "landing", days=8, roots=("ES", "ZN"), start=date(2024, 3, 7), seed=3))
    raw = base / "raw"
    for f in files:
        ingest_dbn_file(f, raw_bars_partition_path(raw, f.name), source_file=f.name)
    return [f.name for f in files], raw


def _land(raw: Path, root: UPath, names: list[str]) -> None:
    for name in names:
        dest = raw_bars_partition_path(root.path, name)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(raw_bars_partition_path(raw, name), dest)


def _build(root: UPath, new_files: list[str]) -> None:
    """continuous_bars + features of the new files' dates and the stored date before them."""
    days = continuous_dates.touched_dates(root, new_files)
    before = [d for d in trade_dates.stored_dates(root, continuous_dates.TABLE) if d < days[0]]
    continuous_dates.build_dates(root, days)
    by_date.build_dates(root, before[-1] if before else days[0], days[-1])


def _warehouse(landed, tmp_path: Path, name: str = "w", upto: int | None = None) -> UPath:
    files, raw = landed
    root = UPath(tmp_path / name)
    _land(raw, root, files[:upto])
    _build(root, files[:upto])
    return root


def _arrays_builder(root: UPath) -> TrainingData:
    """The dataset as the asset built it before issue 25 (saved and loaded, as readers got it)."""
    closes = trade_dates.scan_table(root, "continuous_bars").select("ts_event", "root", "close").collect()
    return build_training_dataset(trade_dates.scan_table(root, "features"), CFG, close_prices=closes)


def _incremental(root: UPath, cache: Path) -> tuple[TrainingData, dataset_dates.DatasetUpdate]:
    done = dataset_dates.update(root, CFG)
    dataset_dates.publish(root, done)
    return dataset_store.load(root, cache), done


def _assert_same(a: TrainingData, b: TrainingData) -> None:
    """Equal meta and arrays; the normalisation statistics (and so the normalised observed
    features) within float rounding of their summation order."""
    ma, mb = json.loads(json.dumps(a.meta)), json.loads(json.dumps(b.meta))
    na, nb = ma.pop("normalization"), mb.pop("normalization")
    assert ma == mb
    assert na["clip_sigma"] == nb["clip_sigma"]
    np.testing.assert_allclose(na["mean"], nb["mean"], rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(na["std"], nb["std"], rtol=1e-12)
    for split in ("train", "validation", "test"):
        for name in (*ARRAYS, "window_starts"):
            x, y = getattr(a.splits[split], name), getattr(b.splits[split], name)
            assert x.shape == y.shape and x.dtype == y.dtype, (split, name)
            if name == "observed":
                np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6)
            else:
                np.testing.assert_array_equal(x, y)


def test_blocks_read_back_as_the_arrays_builder_made_them(landed, tmp_path):
    root = _warehouse(landed, tmp_path)
    got, done = _incremental(root, tmp_path / "cache")
    assert len(got.meta["roots"]) == 2 and got.meta["splits"]["validation"]["rows"] > 0
    _assert_same(_arrays_builder(root), got)
    # the asset's metadata and warnings read the narrow arrays of the update itself
    for split in got.splits:
        np.testing.assert_array_equal(done.data.splits[split].ts_event, got.splits[split].ts_event)
        assert done.data.splits[split].nbytes() == got.splits[split].nbytes()
    # the stored dataset is raw blocks: no split matrix in the warehouse, and the arrays
    # loader points a direct reader at the store
    stored = Path(root.path) / "training_dataset"
    assert LAYOUT in json.loads((stored / "meta.json").read_text())
    assert not (stored / "train").exists()
    with pytest.raises(ValueError, match="per-date blocks"):
        TrainingData.load(stored)


def test_a_new_date_summarises_only_its_dates_and_equals_a_build_from_scratch(landed, tmp_path, monkeypatch):
    files, raw = landed
    root = _warehouse(landed, tmp_path, upto=-1)
    first, _ = _incremental(root, tmp_path / "cache")
    _land(raw, root, files[-1:])
    _build(root, files[-1:])
    read: list[str] = []
    real = object_store.read_parquet
    monkeypatch.setattr(object_store, "read_parquet", lambda p, columns=None: read.append(str(p)) or real(p, columns))
    done = dataset_dates.update(root, CFG)
    monkeypatch.undo()
    dataset_dates.publish(root, done)
    got = dataset_store.load(root, tmp_path / "cache")
    new = continuous_dates.touched_dates(root, files[-1:])
    span = [d for d in trade_dates.stored_dates(root, "features") if d >= new[0]]
    span = [max(d for d in trade_dates.stored_dates(root, "features") if d < new[0]), *span]
    assert done.summarised == len(span) and done.reused >= 3  # the rebuilt dates, no other
    assert {date.fromisoformat(p.split("trade_date=")[1][:10]) for p in read} <= set(span)
    assert got.meta["splits"] != first.meta["splits"]  # the split moved with the new date
    scratch = _warehouse(landed, tmp_path, name="scratch")
    again, _ = _incremental(scratch, tmp_path / "cache2")
    _assert_same(again, got)
    _assert_same(_arrays_builder(root), got)


def test_an_arrays_dataset_of_before_stays_readable_until_blocks_replace_it(landed, tmp_path):
    root = _warehouse(landed, tmp_path)
    old = _arrays_builder(root)
    dataset_store.save(old, root, tmp_path / "scratch")
    stored = Path(root.path) / "training_dataset"
    assert dataset_store.local_dir(root, tmp_path / "cache") == stored
    got, _ = _incremental(root, tmp_path / "cache")
    _assert_same(old, got)
    assert (stored / "train").is_dir()  # a reader of the arrays may still be opening them
    _incremental(root, tmp_path / "cache")
    assert not (stored / "train").exists()  # two versions on, they go


def test_features_stored_one_file_per_root_read_back_the_same(landed, tmp_path):
    """A warehouse whose features dates hold one file per root (before one file per date)."""
    root = _warehouse(landed, tmp_path)
    want, _ = _incremental(root, tmp_path / "cache")
    for day, parts in trade_dates.date_parts(root, "features").items():
        frame = pl.concat([object_store.read_parquet(p) for p in parts])
        for p in parts:
            p.unlink()
        for (r,), part in frame.partition_by("root", as_dict=True).items():
            trade_dates.write_part(root, "features", day, part, part=f"root={r}")
    got, done = _incremental(root, tmp_path / "cache")
    assert done.summarised == len(trade_dates.stored_dates(root, "features"))
    _assert_same(want, got)


def test_a_features_date_is_one_file_and_each_continuous_date_is_read_once(landed, tmp_path, monkeypatch):
    files, raw = landed
    root = UPath(tmp_path / "w")
    _land(raw, root, files)
    days = continuous_dates.all_dates(root)
    continuous_dates.build_dates(root, days)
    # an older features layout on one date: its per-root files are replaced by the rebuild
    trade_dates.write_part(root, "features", days[2], pl.DataFrame({"root": ["ES"]}), part="root=ES")
    read: list[str] = []
    real = object_store.read_parquet
    monkeypatch.setattr(object_store, "read_parquet", lambda p, columns=None: read.append(str(p)) or real(p, columns))
    by_date.build_dates(root, days[0], days[-1])
    cont = [p for p in read if "/continuous_bars/" in p]
    assert cont and len(cont) == len(set(cont))  # two roots' segments, one read of each date
    for day, parts in trade_dates.date_parts(root, "features").items():
        assert [p.name for p in parts] == ["data.parquet"], day
        roots = object_store.read_parquet(parts[0], columns=["root"])["root"]
        assert roots.is_sorted()
    assert set(trade_dates.read_dates(root, "features")["root"].unique()) == {"ES", "ZN"}


def test_a_segment_ending_inside_the_run_is_read_up_to_its_own_last_date(landed, tmp_path):
    """Reading to the run's end instead kept every continuous_bars date cached (and filtered
    for each segment) until the last segment: memory and time grew with the history."""
    files, raw = landed
    root = UPath(tmp_path / "w")
    _land(raw, root, files)
    days = continuous_dates.all_dates(root)
    continuous_dates.build_dates(root, days)
    fronts = continuous_dates.read_fronts(root)
    spans = by_date.segment_spans(fronts, days[0], days[-1])
    ended = [s for s in spans if s.days[-1] < days[-1]]
    assert ended  # ES's March roll lies inside the run
    for s in spans:
        mine = fronts.filter((pl.col("root") == s.root) & (pl.col("contract_seq") == s.seq))["day"]
        assert s.last == (mine.max() if s in ended else days[-1]), s


def _same_summary(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_the_writers_summary_of_a_date_equals_the_one_read_from_its_file(landed, tmp_path, monkeypatch):
    root = _warehouse(landed, tmp_path)
    dates = trade_dates.date_parts(root, "features")
    for day, (path,) in dates.items():
        kept = dataset_store.features_summary(path)
        assert kept is not None, day
        _same_summary(kept, dataset_dates.summarise_features(dataset_store.canonical(object_store.read_parquet(path))))
    read: list[str] = []
    real = object_store.read_parquet
    monkeypatch.setattr(object_store, "read_parquet", lambda p, columns=None: read.append(str(p)) or real(p, columns))
    done = dataset_dates.update(root, CFG)
    monkeypatch.undo()
    assert done.summarised == len(dates)
    assert read and not [p for p in read if "/features/" in p]  # closes only: no features file read back
    dataset_dates.publish(root, done)
    _assert_same(_arrays_builder(root), dataset_store.load(root, tmp_path / "cache"))


def test_a_home_without_writer_summaries_or_with_stale_ones_builds_the_same(landed, tmp_path):
    root = _warehouse(landed, tmp_path)
    want, _ = _incremental(root, tmp_path / "cache")
    shutil.rmtree(Path(root.path) / "training_dataset")
    dates = trade_dates.date_parts(root, "features")
    (first, (stale,)), *rest = dates.items()
    for _day, (path,) in rest:  # a home written before the features writer kept summaries
        Path(dataset_store.features_summary_path(path).path).unlink()
    # a file rewritten after its summary was kept (same rows here): the summary is not used
    trade_dates.write_part(root, "features", first, object_store.read_parquet(stale))
    assert dataset_store.features_summary(stale) is None
    got, done = _incremental(root, tmp_path / "cache2")
    assert done.summarised == len(dates)
    _assert_same(want, got)
    assert got.meta == want.meta  # the same summaries: bit for bit, statistics included
    for split in got.splits:
        for name in (*ARRAYS, "window_starts"):
            np.testing.assert_array_equal(getattr(got.splits[split], name), getattr(want.splits[split], name))
    assert all(dataset_store.features_summary(p) is None for _d, (p,) in dates.items())


def test_rows_waiting_on_disk_write_the_same_dates(landed, tmp_path, monkeypatch):
    """Rows of dates waiting for another root's segment spill to disk beyond the buffer's
    budget (memory flat in the history's length): the dates written are the same."""
    files, raw = landed
    roots = {}
    spilled: list[str] = []
    real = by_date._DateBuffer._spill
    monkeypatch.setattr(by_date._DateBuffer, "_spill",
                        lambda self, day, r, part: spilled.append(r) or real(self, day, r, part))
    for name, budget in (("memory", 1 << 40), ("disk", 0)):
        root = roots[name] = UPath(tmp_path / name)
        _land(raw, root, files)
        days = continuous_dates.all_dates(root)
        continuous_dates.build_dates(root, days)
        by_date.build_dates(root, days[0], days[-1], spill_bytes=budget)
        assert not list((Path(root.path) / "features").glob(".spill*"))  # removed when the run ends
        if name == "memory":
            assert not spilled
    assert spilled
    mem, disk = (trade_dates.date_parts(roots[n], "features") for n in ("memory", "disk"))
    assert mem.keys() == disk.keys()
    for day in mem:
        a, b = (object_store.read_parquet(parts[day][0]) for parts in (mem, disk))
        assert a.equals(b) and a.schema == b.schema, day
        _same_summary(dataset_store.features_summary(mem[day][0]), dataset_store.features_summary(disk[day][0]))


def test_summary_finds_every_non_finite_cell():
    ts = pl.datetime_range(datetime(2024, 3, 7, 14, 30, tzinfo=UTC), datetime(2024, 3, 7, 14, 35, tzinfo=UTC), "1m",
                           eager=True)
    n = ts.len()
    frame = pl.DataFrame({
        "ts_event": ts, "root": ["ES"] * n, "contract_seq": pl.Series([1] * n, dtype=pl.Int32),
        "f_a": pl.Series([1.0, None, 3.0, float("nan"), 5.0, 6.0], dtype=pl.Float32),
        "f_b": pl.Series([1.0, 2.0, float("inf"), 4.0, 5.0, 6.0], dtype=pl.Float32),
        "k_a": pl.Series([0.0, 0.0, 0.0, 0.0, float("-inf"), 0.0], dtype=pl.Float32),
        "s_a": pl.Series([1.0] * n, dtype=pl.Float32),
        "y_1": pl.Series([0.0, 0.0, 0.0, 0.0, 0.0, float("inf")], dtype=pl.Float32),
    })
    got = dataset_dates.summarise_features(frame)
    assert got["nf_observed_nan"].tolist() == [[1, 3], [0, 0]]  # null and NaN
    assert got["nf_observed_inf"].tolist() == [[2], [1]]
    assert got["nf_known"].tolist() == [[4], [0]]
    assert got["nf_static"].shape == (2, 0) and got["nf_static"].dtype == np.int32
    assert got["nf_targets"].tolist() == [[5], [0]]
    assert got["moments"].shape == (1, 3, 2) and got["moments"][0, 0].tolist() == [5.0, 6.0]


def test_a_killed_runs_spill_directory_is_swept(tmp_path, monkeypatch):
    """A run killed before ``close`` leaves its spill directory; the start-up sweep removes
    it once its owner is dead, and never a live run's."""
    from foxhunt_pipeline.storage import scratch

    root = UPath(tmp_path / "wh")
    buffer = by_date._DateBuffer(root, [], build=None)
    path = buffer._spill(date(2024, 1, 2), "ES", pl.DataFrame({"x": [1.0]}))
    spill_dir = path.parent
    assert spill_dir.parent == Path(root.path) / "features" and spill_dir.name.startswith(".spill.")
    assert scratch.sweep_tree(Path(root.path)) == [] and path.exists()  # its owner is alive
    monkeypatch.setattr(scratch, "_orphaned", lambda host, pid: True)  # the owner was killed
    assert scratch.sweep_tree(Path(root.path)) == [spill_dir]
    assert not spill_dir.exists()
