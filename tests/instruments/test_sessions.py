"""A hole in the data is a session the root's exchange calendar has and the data lacks, or
more open market without a bar than the root's no-trade limit inside one; weekends,
holidays, the daily halt and a quiet quarter of an hour are none (instruments.sessions)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from functools import lru_cache

import numpy as np
import polars as pl

from foxhunt_pipeline.instruments.sessions import (
    gaps,
    missing_sessions,
    new_stretch,
    open_minutes,
    open_ns_between,
    quiet_limit,
    session_holes,
    stretch_numbers,
)


def test_weekends_and_holidays_are_not_missing_sessions_and_a_hole_is():
    assert missing_sessions("ES", date(2024, 1, 5), date(2024, 1, 8)) == 0  # Friday -> Monday
    assert missing_sessions("ES", date(2024, 12, 24), date(2024, 12, 26)) == 0  # Christmas closed
    assert missing_sessions("ES", date(2024, 1, 12), date(2024, 1, 16)) == 1  # MLK day trades (early close)
    assert missing_sessions("ES", date(2013, 10, 15), date(2013, 10, 29)) == 9  # two weeks without data
    assert missing_sessions("GC", date(2013, 12, 20), date(2020, 1, 6)) > 1500


def test_stretches_restart_after_a_hole_per_root():
    days = [date(2024, 1, 2), date(2024, 1, 3), date(2024, 1, 10), date(2024, 1, 11)]
    frame = pl.DataFrame({"root": ["ES"] * 4 + ["ZN"] * 2, "_td": days + days[:2]})
    got = stretch_numbers(frame).sort("root", "_td")
    assert got.filter(pl.col("root") == "ES")["_stretch"].to_list() == [0, 0, 1, 1]
    assert got.filter(pl.col("root") == "ZN")["_stretch"].to_list() == [0, 0]
    (hole,) = gaps("ES", days)
    assert (hole.last_before, hole.first_after, hole.missing) == (date(2024, 1, 3), date(2024, 1, 10), 4)


def test_open_minutes_count_the_sessions_only():
    # Friday 16:00 CT (22:00 UTC in winter) to Saturday: the market is closed
    assert open_minutes("ES", datetime(2024, 1, 5, 22, 0, tzinfo=UTC), datetime(2024, 1, 6, tzinfo=UTC)) == 0
    # 08:35 UTC to midnight on a Monday: open all but the daily halt (22:00-23:00 UTC)
    hours = open_minutes("ES", datetime(2024, 1, 8, 8, 35, tzinfo=UTC), datetime(2024, 1, 9, tzinfo=UTC)) / 60
    assert 14 < hours < 15.5


#: the schedule the reference reads: it covers every interval the tests below draw
SCHEDULE_SPAN = (datetime(2023, 12, 1, tzinfo=UTC), datetime(2024, 2, 15, tzinfo=UTC))


@lru_cache(maxsize=4)
def _schedule(calendar: str):
    import pandas_market_calendars as mcal

    return mcal.get_calendar(calendar).schedule(*(d.date() for d in SCHEDULE_SPAN))


def _schedule_minutes(calendar: str, start: datetime, end: datetime) -> float:
    """The calendar's open minutes between two instants, straight from its schedule."""
    import pandas as pd

    assert SCHEDULE_SPAN[0] <= start <= end <= SCHEDULE_SPAN[1], (start, end)
    sched = _schedule(calendar)
    lo, hi = pd.Timestamp(start), pd.Timestamp(end)
    total = pd.Timedelta(0)
    for row in sched.itertuples():
        total += max(min(row.market_close, hi) - max(row.market_open, lo), pd.Timedelta(0))
        if "break_start" in sched.columns and pd.notna(row.break_start):
            total -= max(min(row.break_end, hi) - max(row.break_start, lo), pd.Timedelta(0))
    return total / pd.Timedelta(minutes=1)


def test_open_minutes_are_the_schedules_for_any_interval():
    # ingest asks once per file, so the calendar is evaluated once per year span: any
    # interval (across a weekend, a holiday, an early close, New Year) is the schedule's
    rng = np.random.default_rng(3)
    starts = datetime(2023, 12, 20, tzinfo=UTC).timestamp() + rng.uniform(0, 30 * 86400, 40)
    for root, calendar in (("ES", "CME_Equity"), ("ZN", "CME_Bond")):
        for t0, hours in zip(starts, rng.uniform(0.1, 80, starts.size), strict=True):
            start = datetime.fromtimestamp(round(t0), UTC)
            end = datetime.fromtimestamp(round(t0 + hours * 3600), UTC)
            assert abs(open_minutes(root, start, end) - _schedule_minutes(calendar, start, end)) < 1e-6, (
                root, start, end)


def _bars(*times: str, root: str = "ES") -> pl.DataFrame:
    ts = pl.Series([datetime.fromisoformat(t).replace(tzinfo=UTC) for t in times]).cast(pl.Datetime("ns", "UTC"))
    return pl.DataFrame({"root": [root] * len(times), "contract_seq": [0] * len(times), "ts_event": ts})


def test_a_hole_is_more_open_market_without_a_bar_than_the_roots_quiet_limit():
    assert quiet_limit("ES") == quiet_limit("CL") == 30 and quiet_limit("ZC") == 60
    quiet = _bars("2024-01-10T14:00", "2024-01-10T14:01", "2024-01-10T14:31")  # 29 minutes without a bar
    assert new_stretch(quiet).tolist() == [True, False, False]
    outage = _bars("2024-01-10T14:00", "2024-01-10T14:39", "2024-01-10T14:40")  # 38 minutes
    starts = new_stretch(outage)
    assert starts.tolist() == [True, True, False]
    assert [str(h) for h in session_holes(outage, starts)] == [
        "ES 2024-01-10 14:00 .. 2024-01-10 14:39 UTC (38 open minutes without a bar)"]
    # the daily halt (22:00-23:00 UTC) and a weekend are closed time: no hole
    assert new_stretch(_bars("2024-01-10T21:59", "2024-01-10T23:00")).tolist() == [True, False]
    assert new_stretch(_bars("2024-01-12T21:59", "2024-01-14T23:00")).tolist() == [True, False]
    # a session whose data stops hours before its close: a hole, reported like an outage
    cut = _bars("2024-01-10T12:00", "2024-01-10T23:00")
    assert new_stretch(cut).tolist() == [True, True] and len(session_holes(cut, new_stretch(cut))) == 1
    # a whole missing session is a hole too (a Gap, not reported as a hole inside a session)
    missing = _bars("2024-01-09T21:59", "2024-01-11T23:00")
    assert new_stretch(missing).tolist() == [True, True] and session_holes(missing, new_stretch(missing)) == []
    # the calendar's breaks are closed time: grains pause 07:45-08:30 CT
    ns = [np.datetime64(t, "ns").astype(np.int64) for t in ("2024-01-10T13:40", "2024-01-10T14:35")]
    assert open_ns_between("ZC", np.array([ns[0]]), np.array([ns[1]]))[0] == 10 * 60 * 10**9
    # each (root, contract) is its own series: a roll starts a stretch
    rolled = quiet.with_columns(contract_seq=pl.Series([0, 1, 1], dtype=pl.Int32))
    assert new_stretch(rolled).tolist() == [True, True, False]
