"""The generator's oracle as the leaderboard's reference row.

The leaderboard's rows carry their walk-forward test period as timestamps; the oracle's
figures live per UTC day in the landed files' sidecars. The test period's first and last
bars are mapped to their CME trade dates (the folds are cut at trade dates) and the
sidecars of those days are pooled. A trade date's evening hour before midnight UTC is in
the previous day's file, so the edges can differ by that hour; every other bar matches.
Real data (no sidecar) gives no row and a one-line note; a broken sidecar too: the
reference is never a reason for the leaderboard to fail.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any

import polars as pl

from foxhunt_pipeline.features.grid import trade_date_expr
from foxhunt_pipeline.synthetic.run_metadata import oracle_summary
from models.evaluation.leaderboard import (
    ORACLE,
    oracle_note,
    oracle_row,
    protocol_roots,
    test_period,
)


def trade_date_of(iso_utc: str) -> date:
    """The CME trade date of an ISO UTC timestamp (``2024-01-18T22:05:00Z``)."""
    ts = datetime.fromisoformat(str(iso_utc).replace("Z", "+00:00"))
    frame = pl.DataFrame({"ts_event": pl.Series([ts]).cast(pl.Datetime("ns", "UTC"))})
    return frame.select(trade_date_expr()).item()


def oracle_for_test_period(
    landing_dir: str | os.PathLike[str], test_start: str, test_end: str,
    roots: Sequence[str] | None = None,
) -> dict[str, Any] | None:
    """:func:`.run_metadata.oracle_summary` over the trade dates of ``test_start ..
    test_end`` (ISO UTC), restricted to ``roots`` (None or empty: all)."""
    return oracle_summary(landing_dir, start=trade_date_of(test_start),
                          end=trade_date_of(test_end), roots=list(roots) if roots else None)


def oracle_reference(
    landing_dir: str | os.PathLike[str], rows: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, Any] | None, str]:
    """``(row, note)`` for the leaderboard: the oracle over the same test period and roots
    as ``rows`` (the pooled rows of one protocol), or ``(None, why not)``."""
    period = test_period(rows)
    if period is None:
        return None, f"No `{ORACLE}` row: the evaluations carry no test period."
    first, last = trade_date_of(period[0]), trade_date_of(period[1])
    try:
        summary = oracle_for_test_period(landing_dir, *period, roots=protocol_roots(rows))
    except (OSError, ValueError, KeyError, TypeError) as e:  # a sidecar of another shape
        return None, f"No `{ORACLE}` row: the generator sidecars in {landing_dir} are unreadable: {e}"
    if summary is None:
        return None, (f"No `{ORACLE}` row: no landed file of the test trade dates {first} .. "
                      f"{last} in {landing_dir} has a generator sidecar (real data has none).")
    return oracle_row(summary), oracle_note(summary, first.isoformat(), last.isoformat())
