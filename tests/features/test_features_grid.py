"""The regular in-session grid: fills holes inside a session only."""

from __future__ import annotations

from datetime import UTC, date, datetime

import polars as pl
import pytest

from foxhunt_pipeline.features.grid import regular_grid, session_minute_expr, trade_date_expr
from tests.features_fixtures import make_continuous


def _bars(times: list[datetime], closes: list[float], seq: list[int] | None = None) -> pl.DataFrame:
    n = len(times)
    return pl.DataFrame(
        {
            "ts_event": pl.Series(times).dt.cast_time_unit("ns"),
            "root": ["ES"] * n,
            "contract_seq": pl.Series(seq or [0] * n, dtype=pl.Int32),
            "open": [c - 0.25 for c in closes],
            "high": [c + 0.5 for c in closes],
            "low": [c - 0.5 for c in closes],
            "close": closes,
            "volume": pl.Series([10] * n, dtype=pl.UInt64),
        }
    )


def utc(*a: int) -> datetime:
    return datetime(*a, tzinfo=UTC)


def test_trade_date_rolls_at_17_ct_across_dst():
    ts = pl.DataFrame(
        {
            "ts_event": pl.Series(
                [
                    utc(2024, 1, 2, 22, 59),
                    utc(2024, 1, 2, 23, 0),
                    utc(2024, 7, 2, 21, 59),
                    utc(2024, 7, 2, 22, 0),
                ]
            ).dt.cast_time_unit("ns")
        }
    )
    out = ts.select(td=trade_date_expr(), sm=session_minute_expr())
    assert out["td"].to_list() == [
        date(2024, 1, 2),
        date(2024, 1, 3),
        date(2024, 7, 2),
        date(2024, 7, 3),
    ]
    assert out["sm"].to_list() == [1439, 0, 1439, 0]


def test_holes_inside_a_session_are_filled_with_the_previous_close():
    bars = _bars([utc(2024, 1, 2, 14, 30), utc(2024, 1, 2, 14, 34)], [100.0, 101.0])
    g = regular_grid(bars)
    assert g.height == 5
    assert g["is_filled"].to_list() == [False, True, True, True, False]
    filled = g.filter("is_filled")
    for c in ("open", "high", "low", "close"):
        assert filled[c].to_list() == [100.0] * 3
    assert filled["volume"].to_list() == [0, 0, 0]
    assert g["volume"].dtype == pl.UInt64
    assert (g["ts_event"].diff().drop_nulls().dt.total_seconds() == 60).all()


def test_never_fills_across_the_daily_halt_weekend_or_a_roll():
    times = [
        utc(2024, 1, 2, 21, 58),  # 15:58 CT
        utc(2024, 1, 2, 23, 1),  # 17:01 CT: next session, after the halt
        utc(2024, 1, 5, 21, 59),  # Friday 15:59 CT
        utc(2024, 1, 7, 23, 0),  # Sunday 17:00 CT
        utc(2024, 1, 7, 23, 3),  # a roll inside the session
    ]
    g = regular_grid(_bars(times, [1.0, 2.0, 3.0, 4.0, 5.0], seq=[0, 0, 0, 0, 1]))
    assert g.height == len(times)
    assert not g["is_filled"].any()


def test_bar_interval_is_a_parameter():
    bars = _bars([utc(2024, 1, 2, 14, 30), utc(2024, 1, 2, 14, 32)], [100.0, 101.0])
    assert regular_grid(bars, bar_seconds=30).height == 5
    assert regular_grid(bars, bar_seconds=60).height == 3


def test_real_bars_are_kept_unchanged():
    c = make_continuous(days=2, roots=("ES",), session_fraction=0.2)
    g = regular_grid(c)
    real = g.filter(~pl.col("is_filled")).drop("is_filled")
    assert real.equals(c)
    assert g.height > c.height


@pytest.mark.parametrize("hole", [2, 45])
def test_grid_row_count_matches_the_hole(hole: int):
    bars = _bars([utc(2024, 1, 2, 14, 0), utc(2024, 1, 2, 14, hole)], [1.0, 2.0])
    assert regular_grid(bars).height == hole + 1
