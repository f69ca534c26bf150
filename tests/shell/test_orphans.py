"""A run whose process died stays STARTED in Dagster; the next foxhunt start fails it.
The process comes from the CLI's tag or from Dagster's own "Executing steps" event (runs
the daemon launched); a run of a live process is left alone."""

from __future__ import annotations

import os
import subprocess
import sys

import dagster as dg
from dagster._core.events import EngineEventData

from foxhunt_pipeline.cli.orphans import PID_TAG, fail_orphaned_runs, owner_tags


@dg.op
def noop() -> None:
    pass


@dg.job
def a_job() -> None:
    noop()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _started_run(instance, tags=None, executor_pid=None, status=dg.DagsterRunStatus.STARTED):
    run = instance.create_run_for_job(a_job, tags=tags or {}, status=status)
    if executor_pid is not None:  # as the in-process / multiprocess executors record it
        instance.report_engine_event(f"Executing steps in process (pid: {executor_pid})", run,
                                     EngineEventData.in_process(executor_pid))
    return run


def test_runs_of_dead_processes_are_failed_and_live_ones_kept():
    dead = _dead_pid()
    with dg.instance_for_test() as instance:
        cli_dead = _started_run(instance, tags={**owner_tags(), PID_TAG: str(dead)})
        daemon_dead = _started_run(instance, executor_pid=dead)
        live = _started_run(instance, executor_pid=os.getppid())
        unknown = _started_run(instance)  # no pid recorded yet: cannot tell, left alone
        other_host = _started_run(instance, tags={PID_TAG: str(dead), "foxhunt/host": "00000000"})
        # a CLI run created, then killed before it started
        created = _started_run(instance, tags={**owner_tags(), PID_TAG: str(dead)},
                               status=dg.DagsterRunStatus.NOT_STARTED)

        assert sorted(fail_orphaned_runs(instance)) == sorted(
            [cli_dead.run_id, daemon_dead.run_id, created.run_id])

        status = {r.run_id: r.status for r in instance.get_runs()}
        assert {status[r.run_id] for r in (cli_dead, daemon_dead, created)} == {dg.DagsterRunStatus.FAILURE}
        for run in (live, unknown, other_host):
            assert status[run.run_id] == dg.DagsterRunStatus.STARTED
        assert fail_orphaned_runs(instance) == []  # once
