"""The persistent instance that FOXHUNT_HOME gets: SQLite storage and a gpu pool of one."""

from __future__ import annotations

import dagster as dg

from foxhunt_pipeline.cli.instance import GPU_POOL, ensure_dagster_home, get_instance
from foxhunt_pipeline.config.paths import FoxhuntPaths


def test_instance_loads_with_sqlite_storage_and_gpu_pool_limit_one(foxhunt_home):
    paths = FoxhuntPaths.from_env().ensure()
    home = ensure_dagster_home(paths)
    assert (home / "dagster.yaml").exists()
    instance = get_instance(paths)
    try:
        assert "Sqlite" in type(instance.run_storage).__name__
        assert str(instance.root_directory) == str(home)
        info = instance.event_log_storage.get_concurrency_info(GPU_POOL)
        assert info.slot_count == 1
        assert instance.get_concurrency_config().pool_config.default_pool_limit == 1
        assert instance.get_concurrency_config().run_queue_config.max_concurrent_runs >= 2
    finally:
        instance.dispose()


def test_existing_dagster_yaml_is_never_overwritten(foxhunt_home):
    paths = FoxhuntPaths.from_env().ensure()
    home = ensure_dagster_home(paths)
    custom = (home / "dagster.yaml").read_text() + "\n# my edit\n"
    (home / "dagster.yaml").write_text(custom)
    ensure_dagster_home(paths)
    assert (home / "dagster.yaml").read_text() == custom
    assert isinstance(dg.DagsterInstance.from_config(str(home)), dg.DagsterInstance)


def test_a_moved_home_stores_runs_in_its_new_place(foxhunt_home, tmp_path):
    """A yaml written when base_dir was an absolute path (a home since moved) is unpinned:
    that line alone changes, and the run storage lives under the new home."""
    paths = FoxhuntPaths.from_env().ensure()
    home = paths.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    old = tmp_path / "old-home" / "dagster"
    (home / "dagster.yaml").write_text(f"storage:\n  sqlite:\n    base_dir: {old}\n# my edit\n")
    ensure_dagster_home(paths)
    text = (home / "dagster.yaml").read_text()
    assert str(old) not in text and "base_dir: {env: DAGSTER_HOME}" in text and "# my edit" in text
    instance = get_instance(paths)
    try:
        instance.run_storage.get_runs()
        assert any(home in p.parents for p in home.rglob("*.db"))
    finally:
        instance.dispose()
    assert not old.exists()
