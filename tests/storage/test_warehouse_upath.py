"""The warehouse layout on a non-local UPath: memory:// stands in for s3:// (same code path:
fsspec filesystem, one object per write), compared against the local warehouse."""

from datetime import date
from pathlib import Path

import polars as pl
import pytest
from upath import UPath

from foxhunt_pipeline.ingest.decode import RAW_BARS_POLARS_SCHEMA, ingest_dbn_file
from foxhunt_pipeline.storage import object_store as store
from foxhunt_pipeline.storage import warehouse as wh
from tests.dbn_fixtures import es_day_file

KEYS = ["glbx-mdp3-20240102.ohlcv-1m.dbn.zst", "my file (2)→é.dbn"]


@pytest.fixture
def memory_root(tmp_path: Path):
    root = UPath(f"memory://foxhunt-{tmp_path.name}/warehouse")
    yield root
    if root.exists():
        root.fs.rm(root.path, recursive=True)


def _local_warehouse(tmp_path: Path) -> Path:
    local = tmp_path / "local_wh"
    for i, key in enumerate(KEYS):
        src = es_day_file(tmp_path / "landing" / f"{i}.dbn", date(2024, 1, 2 + i), n=4)
        ingest_dbn_file(src, wh.raw_bars_partition_path(local, key), source_file=key)
    return local


def _sorted(df: pl.DataFrame) -> pl.DataFrame:
    return df.sort("source_file", "instrument_id", "ts_event")


def test_raw_bars_round_trip_on_memory_matches_the_local_warehouse(tmp_path, memory_root):
    local = _local_warehouse(tmp_path)
    for key in KEYS:
        frame = pl.read_parquet(wh.raw_bars_partition_path(local, key))
        store.write_raw_bars_partition(memory_root, key, frame)

    remote = store.scan_raw_bars(memory_root).collect()
    expected = wh.scan_raw_bars(local).collect()
    assert remote.schema == pl.Schema(RAW_BARS_POLARS_SCHEMA)  # ts_event stays ns, UTC
    assert remote.height == expected.height > 0
    assert _sorted(remote).equals(_sorted(expected))
    # the same object names as the local layout, so tooling reads either
    remote_names = {str(p)[len(str(memory_root)) + 1:] for p in store.raw_bars_files(memory_root)}
    local_names = {p.relative_to(local).as_posix() for p in wh._raw_bars_files(local)}
    assert remote_names == local_names


def test_rewriting_a_partition_replaces_it_whole(tmp_path, memory_root):
    local = _local_warehouse(tmp_path)
    frame = pl.read_parquet(wh.raw_bars_partition_path(local, KEYS[0]))
    store.write_raw_bars_partition(memory_root, KEYS[0], frame)
    store.write_raw_bars_partition(memory_root, KEYS[0], frame.head(3))
    assert store.scan_raw_bars(memory_root).collect().equals(frame.head(3))


def test_single_file_tables_and_missing_data(memory_root):
    assert store.scan_raw_bars(memory_root).collect().schema == pl.Schema(RAW_BARS_POLARS_SCHEMA)
    missing = store.table_upath(memory_root, "features")
    with pytest.raises(FileNotFoundError, match="features/data.parquet"):
        store.read_parquet(missing)
    features = pl.DataFrame({"root": ["ES", "ZN"], "ret_1": [0.1, -0.2]})
    store.write_parquet(features, missing)
    assert store.read_parquet(missing).equals(features)


def test_a_file_url_root_is_written_atomically_and_read_by_the_local_code(tmp_path):
    local = _local_warehouse(tmp_path)
    frame = pl.read_parquet(wh.raw_bars_partition_path(local, KEYS[1]))
    root = store.warehouse_root(f"file://{tmp_path / 'file_wh'}")
    assert store.is_local(root)
    store.write_raw_bars_partition(root, KEYS[1], frame)
    assert wh.scan_raw_bars(tmp_path / "file_wh").collect().equals(frame)
    assert not list((tmp_path / "file_wh").rglob("*.tmp"))


def test_warehouse_url_setting(monkeypatch, foxhunt_home):
    monkeypatch.delenv(store.WAREHOUSE_URL_ENV, raising=False)
    assert store.warehouse_root() == UPath(foxhunt_home.resolve() / "warehouse")
    monkeypatch.setenv(store.WAREHOUSE_URL_ENV, "s3://foxhunt-data/prod/warehouse")
    root = store.warehouse_root()
    assert root.protocol == "s3" and str(root) == "s3://foxhunt-data/prod/warehouse"
    assert str(store.raw_bars_partition_upath(root, "a b.dbn")) == (
        "s3://foxhunt-data/prod/warehouse/raw_bars/source_file=a%20b.dbn/data.parquet")
    with pytest.raises(ValueError, match="empty"):
        store.warehouse_root("  ")
