"""The persistent Dagster instance under ``$FOXHUNT_HOME/dagster``, shared by the UI, the
daemon, ``foxhunt materialize`` and ``foxhunt demo`` so every run shows up in one place."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from foxhunt_pipeline.basics.atomic import atomic_write
from foxhunt_pipeline.config.paths import FoxhuntPaths

GPU_POOL = "gpu"
GPU_POOL_LIMIT = 1

DAGSTER_YAML = """\
# Written by foxhunt-pipeline; edit freely, it is only created when missing.
storage:
  sqlite:
    base_dir: {{env: DAGSTER_HOME}}  # not a path: a moved or copied home keeps working
concurrency:
  runs:
    max_concurrent_runs: {max_runs}
  pools:
    # only training assets use a pool ("gpu"): one training at a time on one GPU
    default_limit: {gpu_limit}
telemetry:
  enabled: false
# the daemon fails runs stuck STARTING / CANCELING; runs STARTED by a process that died are
# failed at the next foxhunt start (foxhunt_pipeline.cli.orphans: the default run launcher
# has no run-worker health check)
run_monitoring:
  enabled: true
  start_timeout_seconds: 300
  cancel_timeout_seconds: 300
  poll_interval_seconds: 60
"""


def ensure_dagster_home(paths: FoxhuntPaths, max_concurrent_runs: int | None = None) -> Path:
    """Creates DAGSTER_HOME with SQLite storage and the gpu pool limit; sets the env var."""
    home = paths.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "dagster.yaml"
    if not cfg.exists():
        max_runs = max_concurrent_runs or max(2, os.cpu_count() or 2)
        cfg.write_text(DAGSTER_YAML.format(max_runs=max_runs, gpu_limit=GPU_POOL_LIMIT))
    else:
        _unpin_base_dir(cfg)
    os.environ["DAGSTER_HOME"] = str(home)
    os.environ.setdefault("FOXHUNT_HOME", str(paths.home))
    return home


def _unpin_base_dir(cfg: Path) -> None:
    """A yaml from before homes could move names its storage by absolute path: point it at
    ``DAGSTER_HOME`` instead (only that line changes), so runs never land in the old home."""
    text = cfg.read_text()
    fixed = re.sub(r"(?m)^(\s*base_dir:\s*)(/\S*)\s*$", r"\1{env: DAGSTER_HOME}", text)
    if fixed != text:
        atomic_write(cfg, lambda p: p.write_text(fixed))


def get_instance(paths: FoxhuntPaths | None = None):
    """The persistent instance, with the gpu pool's limit recorded in its storage."""
    # lazy: dagster takes about a second to import, and the `foxhunt` command imports this
    # module at start (commands that need no instance start without it)
    from dagster import DagsterInstance

    paths = paths or FoxhuntPaths.from_env()
    ensure_dagster_home(paths.ensure())
    instance = DagsterInstance.get()
    # older storages without pools: the yaml default_limit still applies
    with contextlib.suppress(Exception):
        instance.event_log_storage.set_concurrency_slots(GPU_POOL, GPU_POOL_LIMIT)
    return instance
