"""A hole in the data is a session the root's exchange calendar has and the data lacks;
weekends, holidays and the daily halt are none (instruments.sessions)."""

from __future__ import annotations

from datetime import UTC, date, datetime

import polars as pl

from foxhunt_pipeline.instruments.sessions import (
    gaps,
    missing_sessions,
    open_minutes,
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
