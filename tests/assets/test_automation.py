"""Declarative automation: a new training_dataset requests each model once; a failed blocking
check on features stops the flow to training_dataset."""

from __future__ import annotations

import dagster as dg

from foxhunt_pipeline.definitions import defs

MODELS = {"tft_model", "mamba2_model", "dqn_agent", "ppo_agent"}


def _requested(result) -> set[str]:
    keys = defs.resolve_asset_graph().get_all_asset_keys()
    return {k.to_user_string() for k in keys if result.get_num_requested(k) > 0}


def _materialize(instance, *names: str) -> None:
    """A successful run of each asset: its materialization and its blocking checks passed."""
    graph = defs.resolve_asset_graph()
    for name in names:
        instance.report_runless_asset_event(dg.AssetMaterialization(name))
        for key in graph.asset_check_keys:
            spec = graph.get_check_spec(key)
            if key.asset_key == dg.AssetKey(name) and spec.blocking:
                instance.report_runless_asset_event(dg.AssetCheckEvaluation(
                    asset_key=key.asset_key, check_name=key.name, passed=True,
                    severity=dg.AssetCheckSeverity.ERROR))


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
        _materialize(instance, "features")
        instance.report_runless_asset_event(
            dg.AssetCheckEvaluation(asset_key=dg.AssetKey("features"), check_name="features_contract",
                                    passed=False, severity=dg.AssetCheckSeverity.ERROR)
        )
        blocked = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
        assert "training_dataset" not in _requested(blocked)
        _materialize(instance, "features")
        instance.report_runless_asset_event(
            dg.AssetCheckEvaluation(asset_key=dg.AssetKey("features"), check_name="features_contract",
                                    passed=True, severity=dg.AssetCheckSeverity.ERROR)
        )
        flowing = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=blocked.cursor)
        assert "training_dataset" in _requested(flowing)
