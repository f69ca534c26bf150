"""Declarative automation: a new training_dataset requests each model once; a failed blocking
check on features stops the flow to training_dataset."""

from __future__ import annotations

import dagster as dg

from foxhunt_pipeline.definitions import defs

MODELS = {"tft_model", "mamba2_model", "dqn_agent", "ppo_agent"}


def _requested(result) -> set[str]:
    keys = defs.resolve_asset_graph().get_all_asset_keys()
    return {k.to_user_string() for k in keys if result.get_num_requested(k) > 0}


DATE = "2024-01-03"  # a trade-date partition of continuous_bars and features
DATED = {"continuous_bars", "features"}


def _materialize(instance, *names: str, day: str = DATE, checks: bool = True) -> None:
    """A successful run of each asset: its materialization and (``checks``) its blocking
    checks passed."""
    graph = defs.resolve_asset_graph()
    for name in names:
        partition = day if name in DATED else None
        instance.report_runless_asset_event(dg.AssetMaterialization(name, partition=partition))
        for key in graph.asset_check_keys:
            spec = graph.get_check_spec(key)
            if checks and key.asset_key == dg.AssetKey(name) and spec.blocking:
                instance.report_runless_asset_event(dg.AssetCheckEvaluation(
                    asset_key=key.asset_key, check_name=key.name, passed=True,
                    severity=dg.AssetCheckSeverity.ERROR, partition=partition))


def _features_check(instance, passed: bool, day: str = DATE) -> None:
    instance.report_runless_asset_event(
        dg.AssetCheckEvaluation(asset_key=dg.AssetKey("features"), check_name="features_contract",
                                passed=passed, severity=dg.AssetCheckSeverity.ERROR, partition=day)
    )


def test_new_training_dataset_requests_each_model_once():
    with dg.instance_for_test() as instance:
        start = dg.evaluate_automation_conditions(defs=defs, instance=instance)  # the daemon's first tick
        assert not _requested(start)
        _materialize(instance, "continuous_bars", "features", "training_dataset")
        first = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=start.cursor)
        assert _requested(first) >= MODELS
        assert all(first.get_num_requested(dg.AssetKey(m)) == 1 for m in MODELS)
        again = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
        assert not (_requested(again) & MODELS)
        _materialize(instance, "training_dataset")
        third = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=again.cursor)
        assert _requested(third) >= MODELS


def test_failed_blocking_check_stops_the_flow_downstream():
    with dg.instance_for_test() as instance:
        start = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        _materialize(instance, "continuous_bars", "features", "training_dataset")
        first = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=start.cursor)
        _materialize(instance, "features", day="2024-01-04", checks=False)
        _features_check(instance, passed=False, day="2024-01-04")
        blocked = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
        assert "training_dataset" not in _requested(blocked)
        _materialize(instance, "features", day="2024-01-05")  # the next date, its check passes
        flowing = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=blocked.cursor)
        assert "training_dataset" in _requested(flowing)


def _decay_check(instance, passed: bool, day: str) -> None:
    """A live_performance partition and its decay check's verdict against it, as the asset
    yields them."""
    from dagster._core.definitions.asset_checks.asset_check_evaluation import (
        AssetCheckEvaluationTargetMaterializationData,
    )

    key = dg.AssetKey("live_performance")
    instance.report_runless_asset_event(dg.AssetMaterialization(key, partition=day))
    mat = instance.fetch_materializations(dg.AssetRecordsFilter(
        asset_key=key, asset_partitions=[day]), limit=1).records[0]
    instance.report_runless_asset_event(dg.AssetCheckEvaluation(
        asset_key=key, check_name="live_pnl_decay", passed=passed,
        severity=dg.AssetCheckSeverity.ERROR, partition=day,
        target_materialization_data=AssetCheckEvaluationTargetMaterializationData(
            run_id=mat.event_log_entry.run_id, storage_id=mat.storage_id,
            timestamp=mat.timestamp)))


def test_a_failed_decay_check_starts_retraining_once():
    """live_pnl_decay failing on a date asks for training_dataset (and so every model) once;
    a date whose check passes asks for nothing; the next date failing asks again."""
    with dg.instance_for_test() as instance:
        start = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        _materialize(instance, "continuous_bars", "features", "training_dataset")
        settled = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=start.cursor)
        _materialize(instance, *MODELS)
        settled = dg.evaluate_automation_conditions(defs=defs, instance=instance,
                                                    cursor=settled.cursor)
        _decay_check(instance, passed=True, day="2024-01-04")
        quiet = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=settled.cursor)
        assert "training_dataset" not in _requested(quiet)
        _decay_check(instance, passed=False, day="2024-01-05")
        alarm = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=quiet.cursor)
        assert alarm.get_num_requested(dg.AssetKey("training_dataset")) == 1
        after = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=alarm.cursor)
        assert "training_dataset" not in _requested(after)
        _decay_check(instance, passed=False, day="2024-01-08")
        again = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=after.cursor)
        assert again.get_num_requested(dg.AssetKey("training_dataset")) == 1


def test_ingested_files_become_one_history_run_over_the_trade_dates_they_hold(foxhunt_home):
    from datetime import date, datetime

    import polars as pl

    from foxhunt_pipeline.automation import RANGE_END, RANGE_START, history_run_requests
    from foxhunt_pipeline.storage.warehouse import raw_bars_partition_path
    from resources.storage import FoxhuntStorage

    storage = FoxhuntStorage()
    names = ["glbx-20240103.dbn.zst", "glbx-20240104.dbn.zst"]
    for name, hour in zip(names, (12, 23), strict=True):  # 23:00 UTC Jan 4 trades Jan 5's date
        day = 3 if name.endswith("03.dbn.zst") else 4
        path = raw_bars_partition_path(storage.warehouse_root.path, name)
        path.parent.mkdir(parents=True)
        pl.DataFrame({"ts_event": [datetime(2024, 1, day, hour)]}).with_columns(
            pl.col("ts_event").dt.cast_time_unit("ns").dt.replace_time_zone("UTC")).write_parquet(path)
    with dg.instance_for_test() as instance:
        assert history_run_requests(instance, storage, 0) == ([], 0)
        for name in names:
            instance.report_runless_asset_event(dg.AssetMaterialization("raw_bars", partition=name))
        (request,), cursor = history_run_requests(instance, storage, 0)
        assert (request.tags[RANGE_START], request.tags[RANGE_END]) == ("2024-01-03", "2024-01-05")
        assert cursor > 0
        assert history_run_requests(instance, storage, cursor) == ([], cursor)  # once per burst
        # late data left stored dates stale: the sensor rebuilds them without a new file
        from foxhunt_pipeline.storage import continuous_dates

        continuous_dates._write_stale(storage.warehouse_root, {date(2024, 1, 4)})
        (stale,), same = history_run_requests(instance, storage, cursor)
        assert (stale.tags[RANGE_START], stale.tags[RANGE_END]) == ("2024-01-04", "2024-01-04")
        assert same == cursor
