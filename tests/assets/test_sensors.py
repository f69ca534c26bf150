"""Landing sensor and schedule logic on temporary instances."""

from __future__ import annotations

import json

import dagster as dg

from foxhunt_pipeline.automation import (
    BATCH_TAG,
    INGEST_JOB,
    RANGE_END,
    RANGE_START,
    landing_sensor,
    retrain_schedule,
)
from foxhunt_pipeline.definitions import defs
from foxhunt_pipeline.ingest.landing import landed_file_names
from resources.storage import FoxhuntStorage


def _land(home, name: str, payload: bytes = b"x") -> None:
    landing = home / "landing"
    landing.mkdir(parents=True, exist_ok=True)
    (landing / name).write_bytes(payload)


def _tick(instance, storage, cursor=None):
    # a context manager: the storage resource has a lifecycle (sweep at start, scratch teardown)
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources={"storage": storage}) as ctx:
        result = landing_sensor(ctx)
    if isinstance(result, dg.SensorResult):
        for req in result.dynamic_partitions_requests or []:
            instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
    return result


def test_new_file_gives_one_run_request_and_same_file_none(foxhunt_home):
    storage = FoxhuntStorage(home=str(foxhunt_home))
    _land(foxhunt_home, "glbx-mdp3-20240102.ohlcv-1m.dbn.zst")
    with dg.instance_for_test() as instance:
        first = _tick(instance, storage)
        assert isinstance(first, dg.SensorResult)
        assert [r.partition_key for r in first.run_requests] == ["glbx-mdp3-20240102.ohlcv-1m.dbn.zst"]
        assert first.run_requests[0].run_key == "landed:glbx-mdp3-20240102.ohlcv-1m.dbn.zst"
        assert json.loads(first.cursor)["registered"] == 1
        # a daemon restart re-evaluates with the stored cursor: nothing new, nothing requested
        again = _tick(instance, storage, cursor=first.cursor)
        assert isinstance(again, dg.SkipReason)
        _land(foxhunt_home, "glbx mdp3 é 20240103.ohlcv-1m.dbn")
        third = _tick(instance, storage, cursor=first.cursor)
        assert [r.partition_key for r in third.run_requests] == ["glbx mdp3 é 20240103.ohlcv-1m.dbn"]
        assert set(instance.get_dynamic_partitions("landed_files")) == {
            "glbx-mdp3-20240102.ohlcv-1m.dbn.zst", "glbx mdp3 é 20240103.ohlcv-1m.dbn",
        }


def test_partial_downloads_and_other_files_are_not_landed(foxhunt_home):
    _land(foxhunt_home, ".glbx.dbn.zst.part")
    _land(foxhunt_home, "notes.txt")
    _land(foxhunt_home, "a.dbn")
    assert landed_file_names(foxhunt_home / "landing") == ["a.dbn"]


def test_automation_is_running_by_default():
    sensors = {s.name: s for s in defs.sensors}
    assert sensors["landing_sensor"].default_status == dg.DefaultSensorStatus.RUNNING
    assert sensors["foxhunt_automation"].default_status == dg.DefaultSensorStatus.RUNNING
    assert retrain_schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    assert retrain_schedule.cron_schedule == "0 4 * * 6"


def test_names_match_in_any_case_and_other_extensions_are_reported_once(foxhunt_home):
    storage = FoxhuntStorage(home=str(foxhunt_home))
    # the generator's sidecar beside a landed file is neither ingested nor reported
    for name in ("ESH4.DBN.ZST", "b.Dbn", "c.dbn.zstd", "d.csv", "b.Dbn.generator.json"):
        _land(foxhunt_home, name)
    assert landed_file_names(foxhunt_home / "landing") == ["ESH4.DBN.ZST", "b.Dbn"]
    with dg.instance_for_test() as instance:
        first = _tick(instance, storage)
        (batch,) = first.run_requests  # both in one run
        assert [batch.tags[RANGE_START], batch.tags[RANGE_END]] == ["ESH4.DBN.ZST", "b.Dbn"]
        assert json.loads(first.cursor)["skipped"] == ["c.dbn.zstd", "d.csv"]
        # the next tick has nothing new to say about them
        assert isinstance(_tick(instance, storage, cursor=first.cursor), dg.SkipReason)
        _land(foxhunt_home, "e.dbn.gz")
        third = _tick(instance, storage, cursor=first.cursor)
        assert not third.run_requests and "e.dbn.gz" in third.skip_reason.skip_message
        assert "c.dbn.zstd" not in third.skip_reason.skip_message


def test_files_landed_together_are_one_run_and_a_failed_batch_runs_each_file_alone(foxhunt_home):
    """A run per file cost the UI's landing of 9 days four minutes of run starts."""
    storage = FoxhuntStorage(home=str(foxhunt_home))
    names = [f"glbx-mdp3-2024010{d}.ohlcv-1m.dbn.zst" for d in (2, 3, 4)]
    for name in names:
        _land(foxhunt_home, name)
    with dg.instance_for_test() as instance:
        first = _tick(instance, storage)
        assert len(first.run_requests) == 1
        (batch,) = first.run_requests
        assert (batch.tags[RANGE_START], batch.tags[RANGE_END]) == (names[0], names[-1])
        assert batch.tags[BATCH_TAG] == "true" and batch.partition_key is None
        # nothing failed yet: a later tick asks for nothing
        assert isinstance(_tick(instance, storage, cursor=first.cursor), dg.SkipReason)
        # the batch failed after the first file was stored: the other two, one run each
        instance.add_run(dg.DagsterRun(job_name=INGEST_JOB, run_id="f" * 32, tags=batch.tags,
                                       status=dg.DagsterRunStatus.FAILURE))
        instance.report_runless_asset_event(dg.AssetMaterialization("raw_bars", partition=names[0]))
        again = _tick(instance, storage, cursor=first.cursor)
        assert [(r.partition_key, r.run_key) for r in again.run_requests] == [
            (n, f"landed:{n}") for n in names[1:]]
