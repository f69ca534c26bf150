"""A moved home reads its own checkpoints and dataset versions, never the old place."""

from __future__ import annotations

import shutil
from pathlib import Path

from upath import UPath

from foxhunt_pipeline.storage import artifact_sync, model_store


def test_model_pointer_follows_a_moved_checkpoints_root(tmp_path):
    old = tmp_path / "old" / "checkpoints"
    run = old / "tft" / "20240101T000000-abc"
    (run / "model").mkdir(parents=True)
    (run / "model" / "model.safetensors").write_bytes(b"x")
    where = model_store.store_run(old, "tft", run)
    model_store.publish(old, "tft", {"family": "tft", "run_dir": where,
                                     "checkpoint": model_store.located(where, run, run / "model" / "model.safetensors")})
    new = tmp_path / "new" / "checkpoints"
    shutil.move(tmp_path / "old", tmp_path / "new")
    pointer = model_store.current(new, "tft")
    assert pointer["run_dir"] == str(new / "tft" / run.name)
    assert Path(pointer["checkpoint"]).read_bytes() == b"x"
    assert model_store.local_run_dir(pointer, tmp_path / "cache") == new / "tft" / run.name
    assert not (tmp_path / "old").exists()


def test_a_pointer_to_a_run_that_is_not_here_is_left_alone(tmp_path):
    root = tmp_path / "checkpoints"
    model_store.publish(root, "ppo", {"family": "ppo", "run_dir": "/elsewhere/checkpoints/ppo/r1",
                                      "checkpoint": "/elsewhere/checkpoints/ppo/r1/policy"})
    assert model_store.current(root, "ppo")["run_dir"] == "/elsewhere/checkpoints/ppo/r1"


def test_dataset_version_is_read_from_the_moved_root(tmp_path):
    src = tmp_path / "build"
    src.mkdir()
    (src / "meta.json").write_text("{}")
    old = tmp_path / "old" / "warehouse"
    old.mkdir(parents=True)
    artifact_sync.publish_version(src, UPath(old), "training_dataset")
    shutil.move(tmp_path / "old", tmp_path / "new")
    got = artifact_sync.fetch_current_version(UPath(tmp_path / "new" / "warehouse"), "training_dataset",
                                              tmp_path / "cache")
    assert (got / "meta.json").read_text() == "{}"
    assert str(got).startswith(str(tmp_path / "new")) or str(got).startswith(str(tmp_path / "cache"))
    assert not (tmp_path / "old").exists()


def test_catalogue_views_read_the_moved_warehouse(tmp_path):
    import polars as pl

    from foxhunt_pipeline.storage import warehouse
    from foxhunt_pipeline.storage.object_store import connect_catalogue

    old = tmp_path / "old"
    (old / "warehouse" / "features").mkdir(parents=True)
    pl.DataFrame({"x": [1, 2, 3]}).write_parquet(old / "warehouse" / "features" / "data.parquet")
    warehouse.refresh_duckdb_views(old / "foxhunt.duckdb", old / "warehouse")
    shutil.move(old, tmp_path / "new")
    new = tmp_path / "new"
    pl.DataFrame({"x": [1, 2, 3, 4]}).write_parquet(new / "warehouse" / "features" / "data.parquet")
    with connect_catalogue(new / "foxhunt.duckdb", UPath(new / "warehouse")) as con:
        assert con.sql("select count(*) from features").fetchall() == [(4,)]
    assert not old.exists()
