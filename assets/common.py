"""Shared asset plumbing: owners, code versions from source, markdown previews."""

from __future__ import annotations

import hashlib
import importlib
import inspect

import dagster as dg
import polars as pl

OWNERS = ["team:foxhunt-quant-ml"]

# New data flows on only when the upstream's blocking checks passed (same-run blocking does
# not cover runs started by automation).
EAGER_AFTER_CHECKS = dg.AutomationCondition.eager() & dg.AutomationCondition.all_deps_blocking_checks_passed()


def code_version_of(*module_names: str) -> str:
    """A short hash of the library modules behind an asset, so the UI flags assets whose
    code changed since they were materialized."""
    h = hashlib.sha256()
    for name in module_names:
        try:
            h.update(inspect.getsource(importlib.import_module(name)).encode())
        except (ImportError, OSError, TypeError):
            h.update(name.encode())
    return h.hexdigest()[:12]


def markdown_table(df: pl.DataFrame, max_rows: int = 20) -> str:
    """Small markdown preview without pandas' optional tabulate dependency."""
    if df.is_empty():
        return "_(no rows)_"
    head = df.head(max_rows)
    cols = head.columns
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in head.iter_rows():
        lines.append("| " + " | ".join(_fmt(v) for v in row) + " |")
    if df.height > max_rows:
        lines.append(f"\n_{df.height - max_rows} more rows_")
    return "\n".join(lines)


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v).replace("|", "\\|")


def check_result(name: str, result) -> dg.AssetCheckResult:
    """A blocking check's verdict with how many rows failed and the first failures as a table."""
    return dg.AssetCheckResult(
        check_name=name,
        passed=bool(result.passed),
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "failed_rows": dg.MetadataValue.int(int(result.n_failed_rows)),
            "message": result.message,
            "first_failures": dg.MetadataValue.md(markdown_table(result.failures, 20)),
        },
    )
