"""``kill -9`` in the middle of raw_bars and of features: the next run marks the dead runs
failed and leaves no temporary file anywhere under FOXHUNT_HOME (issue 18)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

from foxhunt_pipeline.basics.atomic import temp_owner
from foxhunt_pipeline.cli.runner import materialize_selection
from foxhunt_pipeline.config.paths import FoxhuntPaths

REPO = Path(__file__).resolve().parents[2]

# runs the CLI's materialization and freezes right after a temp file under ``marker`` is
# complete (fsync'ed, not yet renamed): the parent then kills it with SIGKILL
FREEZE_AND_RUN = """
import sys, time
import foxhunt_pipeline.basics.atomic as atomic
orig = atomic.fsync_path
def frozen(path):
    orig(path)
    if atomic.temp_owner(path.name) and sys.argv[2] in str(path):
        print("ready", flush=True)
        time.sleep(600)
atomic.fsync_path = frozen
from foxhunt_pipeline.cli.runner import materialize_selection
from foxhunt_pipeline.config.paths import FoxhuntPaths
materialize_selection(FoxhuntPaths.from_env(), sys.argv[1].split(","), profile="fast", echo=print)
print("finished without reaching the marker", flush=True)
"""


def _kill_during(selection: str, marker: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", FREEZE_AND_RUN, selection, marker], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    seen = []
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            seen.append(line)
            if line.strip() == "ready":
                break
        assert seen and seen[-1].strip() == "ready", seen
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()


def _leftovers(home: Path) -> list[Path]:
    temps = [p for p in home.rglob("*") if temp_owner(p.name) or p.name.endswith(".tmp")]
    runs = home / "scratch" / "runs"
    return temps + (list(runs.iterdir()) if runs.is_dir() else [])


@pytest.mark.slow
def test_killed_runs_leave_nothing_behind_after_the_next_run(foxhunt_home):
    import dagster as dg

    from foxhunt_pipeline.synthetic.generate import generate

    paths = FoxhuntPaths.from_env().ensure()
    generate(paths.landing, days=3, roots=("ES",), schema="ohlcv-1m", start=date(2024, 1, 2), seed=3)

    _kill_during("raw_bars", f"{os.sep}scratch{os.sep}runs{os.sep}")  # decoding to staging
    assert _leftovers(paths.home), "the kill should have left a staging file to clean"
    log: list[str] = []
    assert materialize_selection(paths, ["raw_bars", "continuous_bars"], profile="fast",
                                 echo=log.append), log
    assert any("marked failed" in line for line in log), log
    assert _leftovers(paths.home) == []

    _kill_during("features", f"{os.sep}warehouse{os.sep}features{os.sep}")  # writing features
    assert any("features" in p.relative_to(paths.home).parts for p in _leftovers(paths.home))
    log.clear()
    assert materialize_selection(paths, ["continuous_bars"], profile="fast", echo=log.append), log
    assert _leftovers(paths.home) == []

    instance = dg.DagsterInstance.from_config(str(paths.dagster_home))
    try:
        runs = instance.get_runs()
        assert not [r for r in runs if r.status in (dg.DagsterRunStatus.STARTED,
                                                    dg.DagsterRunStatus.STARTING)]
        assert sum(r.status == dg.DagsterRunStatus.FAILURE for r in runs) == 2
    finally:
        instance.dispose()
