"""Sensors and schedules: landed files start ingestion; the history sensor rebuilds the
trade dates they hold (one run per burst); declarative automation carries new data on; a
weekly schedule retrains every model even when nothing new landed.

The jobs, sensors and schedule are built by ``build_automation`` when the code location
starts (``foxhunt_pipeline.definitions``), from the settings it loaded then, never at import.
Their module names (``ingest_job``, ``landing_sensor``, ...) stay: the first use of one builds
them all from this process's settings (``current_settings``)."""


import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg

from assets.common.partitions import landed_files
from foxhunt_pipeline.config.settings import Settings, current_settings
from foxhunt_pipeline.ingest.file_runs import ingest_batches
from foxhunt_pipeline.ingest.landing import (
    PARTITIONS_NAME,
    skipped_file_names,
    skipped_message,
    unregistered,
)
from foxhunt_pipeline.storage import continuous_dates
from resources.storage import FoxhuntStorage

# every run says which size profile its training used (read when the code location loads)
PROFILE_TAG = "foxhunt/profile"
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
ACTIVE = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
          dg.DagsterRunStatus.STARTED]
#: what ``dg.define_asset_job`` returns (its class is not part of Dagster's public API)
AssetJob = Any
INGEST_JOB = "ingest_landed_file"
#: on a landing sensor's run of several files: if it fails, each file is run again alone
BATCH_TAG = "foxhunt/landed_batch"
HISTORY_JOB = "update_history"


@dataclass(frozen=True)
class Automation:
    """The code location's jobs, sensors and schedule, built from one set of settings."""

    profile_tags: dict[str, str]
    ingest_job: AssetJob
    history_job: AssetJob
    retrain_job: AssetJob
    landing_sensor: dg.SensorDefinition
    history_sensor: dg.SensorDefinition
    retrain_schedule: dg.ScheduleDefinition
    automation_sensor: dg.AutomationConditionSensorDefinition


def build_automation(settings: Settings, environ: Mapping[str, str] | None = None) -> Automation:
    """The jobs (tagged with the settings' profile), the sensors and the weekly schedule; the
    intervals and the cron from ``environ`` (``FOXHUNT_LANDING_INTERVAL``,
    ``FOXHUNT_AUTOMATION_INTERVAL``, ``FOXHUNT_RETRAIN_CRON``)."""
    env = os.environ if environ is None else environ
    tags = {PROFILE_TAG: settings.profile}
    landing_interval = int(env.get("FOXHUNT_LANDING_INTERVAL", "15"))
    jobs = _jobs(tags)
    return Automation(
        profile_tags=tags, **jobs,
        landing_sensor=dg.sensor(
            name="landing_sensor", job=jobs["ingest_job"], default_status=dg.DefaultSensorStatus.RUNNING,
            minimum_interval_seconds=landing_interval,
            description="Registers new DBN files in the landing zone as partitions and ingests each once.",
        )(landing_tick),
        history_sensor=dg.sensor(
            name="history_sensor", job=jobs["history_job"], default_status=dg.DefaultSensorStatus.RUNNING,
            minimum_interval_seconds=landing_interval,
            description="After files are ingested, rebuilds continuous_bars and features for the trade "
            "dates they hold (plus the date before) and the stored dates late data moved the front of, "
            "and forecasts them with the champion, in one run per burst of landed files and cluster "
            "of dates.",
        )(history_tick),
        retrain_schedule=dg.ScheduleDefinition(
            name="weekly_retraining",
            job=jobs["retrain_job"],
            cron_schedule=env.get("FOXHUNT_RETRAIN_CRON", "0 4 * * 6"),
            execution_timezone="UTC",
            default_status=dg.DefaultScheduleStatus.RUNNING,
            description="Retrains every model on the latest dataset (cron from FOXHUNT_RETRAIN_CRON).",
        ),
        automation_sensor=dg.AutomationConditionSensorDefinition(
            "foxhunt_automation",
            target=dg.AssetSelection.all(),
            default_status=dg.DefaultSensorStatus.RUNNING,
            minimum_interval_seconds=int(env.get("FOXHUNT_AUTOMATION_INTERVAL", "30")),
            run_tags=tags,
            description="Declarative automation: each asset updates when its upstream changed and the "
            "upstream's blocking checks passed.",
        ),
    )


def _jobs(tags: dict[str, str]) -> dict[str, AssetJob]:
    """The three jobs the sensors and the schedule start, each run tagged with ``tags``."""
    return {
        "ingest_job": dg.define_asset_job(
            INGEST_JOB,
            selection=dg.AssetSelection.assets("raw_bars"),
            description="Decode and validate landed DBN files (the files landed together in one run).",
            tags=tags,
        ),
        "history_job": dg.define_asset_job(
            HISTORY_JOB,
            selection=dg.AssetSelection.assets("continuous_bars", "features", "champion_forecasts",
                                               "live_performance"),
            description="Rebuild continuous_bars and features for a range of trade dates, and the "
            "champion's forecasts and live performance of those dates (no retraining), in one run.",
            tags=tags,
        ),
        "retrain_job": dg.define_asset_job(
            "retrain_models",
            selection=dg.AssetSelection.groups("training", "evaluation", "quantization"),
            description="Retrain, evaluate and quantize every model on the latest training_dataset.",
            tags=tags,
        ),
    }


@functools.cache
def automation() -> Automation:
    """This process's automation, built on first use from its settings."""
    return build_automation(current_settings())


_BUILT = {"PROFILE_TAGS": "profile_tags", "ingest_job": "ingest_job", "history_job": "history_job",
          "retrain_job": "retrain_job", "landing_sensor": "landing_sensor",
          "history_sensor": "history_sensor", "retrain_schedule": "retrain_schedule",
          "automation_sensor": "automation_sensor"}


def __getattr__(name: str):
    """``automation.ingest_job`` and the others: built on first use, not at import."""
    if name in _BUILT:
        return getattr(automation(), _BUILT[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def landing_run_requests(instance: dg.DagsterInstance, storage: FoxhuntStorage):
    """New files -> (the new names, run requests, partition add requests): the new files in
    runs of up to ``INGEST_BATCH`` consecutive files (a run per file cost a year of files
    hundreds of run starts), and each file of a batch that failed, not yet ingested, again in
    a run of its own (so a bad file gets its own named failure and costs the others nothing).
    Run keys make a daemon restart or a repeated tick harmless."""
    known = instance.get_dynamic_partitions(PARTITIONS_NAME)
    new = unregistered(storage.landing_root, known)
    requests = [_ingest_request(batch) for batch in ingest_batches([*known, *new], new)]
    requests += _each_file_of_failed_batches(instance, known)
    adds = [landed_files.build_add_request(new)] if new else []
    return new, requests, adds


def _ingest_request(batch: list[str]) -> dg.RunRequest:
    if len(batch) == 1:
        return dg.RunRequest(partition_key=batch[0], run_key=f"landed:{batch[0]}")
    return dg.RunRequest(run_key=f"landed:{batch[0]}..{batch[-1]}",
                         tags={RANGE_START: batch[0], RANGE_END: batch[-1], BATCH_TAG: "true"})


def _each_file_of_failed_batches(instance: dg.DagsterInstance, known: list[str]
                                 ) -> list[dg.RunRequest]:
    failed = instance.get_runs(filters=dg.RunsFilter(
        job_name=INGEST_JOB, statuses=[dg.DagsterRunStatus.FAILURE], tags={BATCH_TAG: "true"}),
        limit=100)
    if not failed:
        return []
    done = instance.get_materialized_partitions(dg.AssetKey("raw_bars"))
    position = {k: i for i, k in enumerate(known)}
    again: dict[str, None] = {}
    for run in failed:
        first, last = position.get(run.tags.get(RANGE_START)), position.get(run.tags.get(RANGE_END))
        if first is not None and last is not None:
            again |= dict.fromkeys(k for k in known[first:last + 1] if k not in done)
    return [_ingest_request([k]) for k in again]


def landing_tick(context: dg.SensorEvaluationContext, storage: FoxhuntStorage):
    """One tick of the landing sensor: register and ingest the new landed files."""
    new, requests, adds = landing_run_requests(context.instance, storage)
    seen = json.loads(context.cursor) if context.cursor else {"registered": 0}
    # files of another extension are reported once each, not on every tick
    reported = set(seen.get("skipped", []))
    skipped = [n for n in skipped_file_names(storage.landing_root) if n not in reported]
    if skipped:
        context.log.warning(skipped_message(skipped))
    cursor = json.dumps({
        "registered": seen["registered"] + len(new), "last": new[-1] if new else seen.get("last"),
        "skipped": sorted(reported | set(skipped))[-1000:],
    })
    if not requests:
        reason = f"no new files in {storage.landing_root}"
        if not skipped:
            return dg.SkipReason(reason)
        return dg.SensorResult(skip_reason=f"{reason}; {skipped_message(skipped)}", cursor=cursor)
    return dg.SensorResult(run_requests=requests, dynamic_partitions_requests=adds, cursor=cursor)


def history_run_requests(instance: dg.DagsterInstance, storage: FoxhuntStorage, cursor: int):
    """(run requests, new cursor): runs over the trade dates that the raw_bars partitions
    materialized since ``cursor`` (an event storage id) hold, and the stored dates late data
    left stale, once no ingest run is active, so a burst of landed files becomes one rebuild
    (one run per cluster of dates: a hole in the data is not planned as empty partitions)."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("raw_bars"), after_storage_id=cursor), limit=10_000
    ).records
    stale = continuous_dates.stale_dates(storage.warehouse_root)
    if not records and not stale:
        return [], cursor
    if instance.get_runs_count(dg.RunsFilter(job_name=INGEST_JOB, statuses=ACTIVE)):
        return [], cursor  # more files are being ingested: wait and take them all at once
    if stale and instance.get_runs_count(dg.RunsFilter(job_name=HISTORY_JOB, statuses=ACTIVE)):
        return [], cursor  # the stale dates may be the ones a running rebuild is writing
    last = max((r.storage_id for r in records), default=cursor)
    days = continuous_dates.touched_dates(
        storage.warehouse_root, {r.partition_key for r in records if r.partition_key})
    spans = continuous_dates.rebuild_spans(storage.warehouse_root, {*days, *stale})
    key = f"history:{last}" + (f":stale:{stale[0]}:{stale[-1]}:{len(stale)}" if stale else "")
    return [dg.RunRequest(run_key=f"{key}:{a}", tags={RANGE_START: a, RANGE_END: b,
                                                      "foxhunt/started_by": "history_sensor"})
            for a, b in spans], last


def history_tick(context: dg.SensorEvaluationContext, storage: FoxhuntStorage):
    """One tick of the history sensor: the rebuilds newly ingested files call for."""
    requests, cursor = history_run_requests(context.instance, storage, int(context.cursor or 0))
    if not requests:
        return dg.SensorResult(skip_reason="no newly ingested file or stale date to carry downstream",
                               cursor=str(cursor))
    return dg.SensorResult(run_requests=requests, cursor=str(cursor))
