"""Shared asset plumbing: owners, code versions from source, markdown previews."""

from __future__ import annotations

import ast
import functools
import hashlib
import warnings
from pathlib import Path

import dagster as dg
import polars as pl

from foxhunt_pipeline.contracts.validation import ValidationResult

OWNERS = ["team:foxhunt-quant-ml"]

# The two beta parameters the trade-date partitions rely on (single-run backfills, a mapping
# that tolerates dates before the history's start) are deliberate: say so once, not per load.
warnings.filterwarnings("ignore", category=dg.BetaWarning,
                        message=".*(backfill_policy|allow_nonexistent_upstream_partitions).*")

# New data flows on only when the upstream's blocking checks passed (same-run blocking does
# not cover runs started by automation).
EAGER_AFTER_CHECKS = dg.AutomationCondition.eager() & dg.AutomationCondition.all_deps_blocking_checks_passed()
# The same below trade-date partitioned assets, whose partitions before the history's start
# stay missing for ever: waiting for "no missing dependency" would wait for ever.
EAGER_OVER_HISTORY = (
    dg.AutomationCondition.eager().without(~dg.AutomationCondition.any_deps_missing())
    & dg.AutomationCondition.all_deps_blocking_checks_passed()
)

# Retraining when a trade date's live_pnl_decay check (assets.forecasting) newly fails: on
# ``training_dataset``, whose new materialization the models retrain on (the evaluations and
# the leaderboard follow, and the leaderboard demotes a champion the retraining does not
# replace). Each date whose check newly fails asks once (a later date still failing asks
# again: retrain on the newest data until the champion is replaced or demoted).
RETRAIN_ON_DECAY = (
    dg.AutomationCondition.asset_matches("live_performance", dg.AutomationCondition.any_checks_match(
        dg.AutomationCondition.check_failed().newly_true()))
    & ~dg.AutomationCondition.in_progress()
).with_label("live_pnl_decay newly failed")


PROJECT_PACKAGES = ("foxhunt_pipeline", "models")
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _project_imports(module_name: str, source: str) -> set[str]:
    """Project modules that ``source`` imports anywhere (top level or inside functions)."""
    found: set[str] = set()
    path = _module_file(module_name)
    is_package = path is not None and path.name == "__init__.py"
    package = module_name if is_package else module_name.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)  # `from pkg import module`
    return {m for m in found if m.split(".")[0] in PROJECT_PACKAGES}


def project_closure(*module_names: str) -> list[str]:
    """``module_names`` and every project module they import, transitively, sorted."""
    seen: dict[str, str] = {}
    todo = list(module_names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _module_file(name)
        if path is None:  # `from module import name`: name is not a module
            continue
        seen[name] = path.read_text()
        todo.extend(_project_imports(name, seen[name]) - seen.keys())
    return sorted(seen)


@functools.cache
def _module_file(name: str) -> Path | None:
    """The source file of a project module, found without importing it."""
    base = PROJECT_ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _source(name: str) -> str:
    path = _module_file(name)
    return path.read_text() if path is not None else name


def code_version_of(*module_names: str) -> str:
    """A short hash of the library code behind an asset (the named modules and all the
    project modules they import), so the UI flags assets whose code changed since they
    were materialized, wherever in the call tree the change is."""
    h = hashlib.sha256()
    for name in project_closure(*module_names):
        h.update(name.encode())
        h.update(_source(name).encode())
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


#: metadata key of the warnings a person should read (a JSON list of lines); ``foxhunt
#: materialize`` prints them under the run's summary line
WARNINGS = "warnings"
#: a log record attribute: the line is in the ``warnings`` metadata too, so the command
#: line's console logger leaves it to the run summary (printed once, not twice)
IN_SUMMARY = "foxhunt_in_summary"


def report_warnings(context, lines: list[str]) -> dict:
    """Log each warning (the run's event log, the UI) and return the metadata entry holding
    them (empty when none), which ``foxhunt materialize`` prints under the run's line."""
    for line in lines:
        context.log.warning(line, extra={IN_SUMMARY: True})
    return {WARNINGS: dg.MetadataValue.json(list(lines))} if lines else {}


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


def passed_validation() -> ValidationResult:
    """The verdict of a check that found nothing wrong (no failed rows)."""
    return ValidationResult(passed=True, n_failed_rows=0, failures=pl.DataFrame(), message="passed")
