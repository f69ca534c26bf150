"""The generator's session model (Globex hours, full holidays, early closes) opens exactly the
minutes the root's pandas_market_calendars schedule lists as sessions: checked against the
schedule's own market_open / market_close, minute by minute, over a year with both DST
switches, every holiday and every early close."""

from __future__ import annotations

import warnings
from datetime import date, timedelta

import numpy as np
import pandas as pd
import pandas_market_calendars as mcal
import pytest

from foxhunt_pipeline.synthetic.session import NS, open_for, session_bar_starts

YEAR = 2024


def _utc_ns(col: pd.Series) -> np.ndarray:
    return (
        col.dt.tz_convert("UTC")
        .dt.tz_localize(None)
        .to_numpy()
        .astype("datetime64[ns]")
        .astype(np.int64)
    )


def _calendar_minutes(calendar: str, grid: np.ndarray) -> np.ndarray:
    """The grid minutes inside one of the calendar's [market_open, market_close) sessions."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = mcal.get_calendar(calendar).schedule(f"{YEAR - 1}-12-20", f"{YEAR + 1}-01-10")
    opens, closes = _utc_ns(sched["market_open"]), _utc_ns(sched["market_close"])
    assert (opens[1:] >= closes[:-1]).all()
    i = np.searchsorted(opens, grid, side="right") - 1
    inside = (i >= 0) & (grid < closes[np.clip(i, 0, None)])
    return grid[inside]


@pytest.mark.parametrize(
    ("root", "calendar"),
    [
        ("ES", "CME_Equity"),
        ("ZN", "CME_Bond"),
        ("CL", "CMEGlobex_Energy"),
        ("GC", "CMEGlobex_Metals"),
    ],
)
def test_open_minutes_are_the_calendars_sessions(root: str, calendar: str) -> None:
    days = [date(YEAR, 1, 1) + timedelta(days=i) for i in range(366)]
    globex = np.concatenate([session_bar_starts(d, 60) for d in days])
    grid = np.arange(globex[0], globex[-1] + NS, 60 * NS, dtype=np.int64)
    expected = _calendar_minutes(calendar, grid)
    actual = open_for(root, globex)
    if np.array_equal(actual, expected):
        return
    extra, missing = np.setdiff1d(actual, expected), np.setdiff1d(expected, actual)
    show = [str(np.datetime64(int(t), "ns")) for t in np.concatenate([extra, missing])[:3]]
    pytest.fail(f"{root}: {extra.size} bars outside the calendar, {missing.size} missing: {show}")


def test_early_close_lookup_spans_years_and_empty_input() -> None:
    """A range crossing New Year reads both years' early closes; nothing in, nothing out."""
    christmas_eve = session_bar_starts(date(2024, 12, 24), 60)
    mlk_day = session_bar_starts(date(2025, 1, 20), 60)  # early close for CME_Equity
    each = [open_for("ES", christmas_eve), open_for("ES", mlk_day)]
    assert each[0].size < christmas_eve.size and each[1].size < mlk_day.size
    both = open_for("ES", np.concatenate([christmas_eve, mlk_day]))
    assert np.array_equal(both, np.concatenate(each))
    assert open_for("ES", np.empty(0, dtype=np.int64)).size == 0
