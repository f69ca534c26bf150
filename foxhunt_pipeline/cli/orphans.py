"""Runs left STARTED by a process that died (``kill -9``, a crash, a closed laptop lid).

Dagster's run monitoring cannot see them here: the default run launcher has no run-worker
health check (``supports_check_run_worker_health`` is False), a code server only notices
its own children while it lives, and ``foxhunt materialize`` / ``demo`` run in process.
So at every start of the CLI (and of ``foxhunt ui``) each unfinished run whose executing
process is known and dead on this host is reported failed through the instance.

The process is the ``foxhunt/pid`` tag of CLI runs, else the pid Dagster records in the
run's "Executing steps ..." engine event (in-process and multiprocess executors alike).
A run whose process is unknown, alive, or on another host is left alone.
"""

from __future__ import annotations

import os

import dagster as dg

from foxhunt_pipeline.basics.atomic import host_tag
from foxhunt_pipeline.storage.scratch import pid_alive

PID_TAG = "foxhunt/pid"
HOST_TAG = "foxhunt/host"


def owner_tags() -> dict[str, str]:
    """Tags that let a later start tell whether this process is still running the run."""
    return {PID_TAG: str(os.getpid()), HOST_TAG: host_tag()}


def _executor_pid(instance, run_id: str) -> int | None:
    records = instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ENGINE_EVENT, limit=50).records
    for record in records:
        event = record.event_log_entry.dagster_event
        if event is None or not (event.message or "").startswith("Executing steps"):
            continue
        meta = getattr(event.event_specific_data, "metadata", None) or {}
        pid = meta.get("pid")
        if pid is not None:
            return int(getattr(pid, "value", pid))
    return None


def run_owner(instance, run) -> tuple[str | None, int | None]:
    """(host tag or None when unknown, pid or None) of the process executing ``run``."""
    if PID_TAG in run.tags:
        return run.tags.get(HOST_TAG), int(run.tags[PID_TAG])
    return None, _executor_pid(instance, run.run_id)


def fail_orphaned_runs(instance) -> list[str]:
    """Report failed every unfinished run whose process is dead; returns their run ids."""
    # NOT_STARTED too: a CLI run is created, then started by the same process (a queued
    # run of the daemon is QUEUED, and has no process recorded yet in any case)
    unfinished = instance.get_runs(filters=dg.RunsFilter(statuses=[
        dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED,
        dg.DagsterRunStatus.CANCELING]))
    failed = []
    for run in unfinished:
        host, pid = run_owner(instance, run)
        if pid is None or pid == os.getpid() or (host is not None and host != host_tag()):
            continue
        if pid_alive(pid):
            continue
        instance.report_run_failed(
            run, f"the process running this run (pid {pid}) is gone (killed or crashed); "
            "marked failed at the next start. Its temporary files were swept.")
        failed.append(run.run_id)
    return failed
