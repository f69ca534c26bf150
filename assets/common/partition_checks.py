"""Partitioned asset checks whose verdicts are known only while the asset runs: each
verdict yielded against its partition's new materialization (what
``AutomationCondition.check_failed`` reads)."""

from collections.abc import Iterator
from dataclasses import dataclass

import dagster as dg

# not exported at the top level, but the type of AssetCheckEvaluation.target_materialization_data
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)


def check_output(check: str, asset: str) -> dg.Output:
    """The (empty) output a declared check has: its evaluations are yielded per partition."""
    return dg.Output(None, output_name=f"{asset}_{check}")


@dataclass(frozen=True)
class Verdict:
    """A check's verdict on one partition, yielded once the partition is materialized."""

    asset: str
    check: str
    key: str
    passed: bool
    severity: dg.AssetCheckSeverity
    message: str
    metadata: dict


def verdict(asset: str, check: str, key: str, passed: bool, severity, message: str,
                **metadata) -> Verdict:
    """A check's verdict on partition ``key`` with its metadata."""
    return Verdict(asset, check, key, passed, severity, message, metadata)


def check_evaluations(context: dg.AssetExecutionContext,
                 verdicts: list[Verdict]) -> Iterator[dg.AssetCheckEvaluation]:
    """The verdicts as partitioned check evaluations, each against its partition's new
    materialization (what ``AutomationCondition.check_failed`` reads), one per partition of a
    range run."""
    for v in verdicts:
        records = context.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(v.asset), asset_partitions=[v.key]),
            limit=1).records
        target = None if not records else AssetCheckEvaluationTargetMaterializationData(
            run_id=records[0].event_log_entry.run_id, storage_id=records[0].storage_id,
            timestamp=records[0].timestamp)
        yield dg.AssetCheckEvaluation(asset_key=dg.AssetKey(v.asset), check_name=v.check,
                                      passed=v.passed, severity=v.severity, partition=v.key,
                                      target_materialization_data=target,
                                      metadata={"message": v.message, **v.metadata})
