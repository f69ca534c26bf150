"""The CLI's one-line run summary: a blocking (ERROR) check fails the command, a WARN
check is reported and does not."""

from __future__ import annotations

import time

import dagster as dg

from foxhunt_pipeline.cli.runner import _report


def _run_with_failing_check(severity: dg.AssetCheckSeverity) -> dg.ExecuteInProcessResult:
    @dg.asset
    def prices() -> int:
        return 1

    @dg.asset_check(asset=prices, name="price_jumps")
    def price_jumps() -> dg.AssetCheckResult:
        return dg.AssetCheckResult(passed=False, severity=severity,
                                   metadata={"message": "ES 2024-03-04 14:31: a 9% jump"})

    return dg.materialize([prices, price_jumps], raise_on_error=False)


def test_a_failed_warn_check_is_reported_but_the_run_succeeds() -> None:
    lines: list[str] = []
    ok = _report(_run_with_failing_check(dg.AssetCheckSeverity.WARN), "prices",
                 time.perf_counter(), lines.append)
    assert ok, lines
    assert lines[0].startswith("[ok] prices") and "warnings: price_jumps" in lines[0]
    assert "failed checks" not in lines[0] and "a 9% jump" in lines[0]


def test_a_failed_error_check_fails_the_run() -> None:
    lines: list[str] = []
    ok = _report(_run_with_failing_check(dg.AssetCheckSeverity.ERROR), "prices",
                 time.perf_counter(), lines.append)
    assert not ok
    assert lines[0].startswith("[FAILED] prices") and "failed checks: price_jumps" in lines[0]
