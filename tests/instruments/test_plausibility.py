"""Rolls and plausibility on bad values: a wrapped volume does not move the roll,
conflicting duplicates are counted and resolved by the documented rule, price spikes are
flagged (not dropped), and the instrument table holds the CME products' real terms."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import polars as pl
import pytest

from foxhunt_pipeline.contracts.plausibility import price_jumps
from foxhunt_pipeline.instruments.rolls import build_continuous, dedupe_bars, duplicate_conflicts
from foxhunt_pipeline.instruments.specs import ROOTS, expiry_date, parse_outright
from tests.instruments.test_continuous import raw_frame, weekdays


def test_a_volume_near_2_pow_64_does_not_move_the_roll():
    d = weekdays(date(2024, 1, 8), 4)
    vols = [{"ESH4": 900, "ESM4": 90}] * 4
    control, control_rolls = build_continuous(raw_frame(list(zip(d, vols, strict=True))))
    bad = raw_frame(list(zip(d, vols, strict=True))).collect()
    # one ESH4 bar on day 2 carries 2**64 - 100: a u64 daily sum wraps to ~200 < ESM4's 90x3
    row = bad.with_row_index().filter(
        (pl.col("symbol") == "ESH4") & (pl.col("source_file") == f"{d[1]}.dbn")
    )["index"][0]
    bad = bad.with_columns(
        pl.when(pl.int_range(pl.len()) == row).then(pl.lit(2**64 - 100, pl.UInt64))
        .otherwise(pl.col("volume")).alias("volume")
    )
    cont, rolls = build_continuous(bad.lazy())
    assert control_rolls.height == 0
    assert rolls.height == 0  # ESH4 stays front: its true volume is the largest
    assert cont["symbol"].unique().to_list() == ["ESH4"]


def test_conflicting_duplicates_are_counted_and_the_first_file_wins():
    d = weekdays(date(2024, 1, 8), 1)
    a = raw_frame([(d[0], {"ESH4": 900})]).collect()
    same = a.with_columns(pl.lit("b-same.dbn").alias("source_file"))
    other = a.with_columns(pl.lit("c-other.dbn").alias("source_file"),
                           pl.col("close") * 2, pl.col("high") * 2)
    raw = pl.concat([other, a, same]).lazy()
    report = duplicate_conflicts(raw)
    assert report.count == a.height  # every bar of c-other.dbn disagrees; b-same.dbn agrees
    assert report.first["source_file"].unique().to_list() == ["c-other.dbn"]
    assert report.first["kept_file"].unique().to_list() == [f"{d[0]}.dbn"]
    assert "kept the row of the file whose name sorts first" in report.message
    assert "ESH4" in report.message
    kept = dedupe_bars(raw).collect()
    assert kept["close"].to_list() == a["close"].to_list()
    assert duplicate_conflicts(pl.concat([a, same]).lazy()).count == 0


def _minutes(n: int, start: datetime = datetime(2024, 1, 3, 14, 0, tzinfo=UTC)) -> pl.Series:
    return pl.datetime_range(start, start + timedelta(minutes=n - 1), "1m", eager=True,
                             time_unit="ns", time_zone="UTC")


def _bars(close: list[float], ts: pl.Series, root: str = "ES", half_range: float = 0.5) -> pl.DataFrame:
    n = len(close)
    return pl.DataFrame({
        "root": [root] * n, "contract_seq": [0] * n, "ts_event": ts,
        "open": close, "close": close,
        "high": [c + half_range for c in close], "low": [c - half_range for c in close],
    })


def _quiet(n: int = 120, start: datetime = datetime(2024, 1, 3, 14, 0, tzinfo=UTC)) -> pl.DataFrame:
    """Two hours of ES inside one session, a few ticks of range a minute."""
    return _bars([4800.0 + 0.25 * (i % 7) for i in range(n)], _minutes(n, start), half_range=0.125)


def _times(bars: pl.DataFrame, *at: int) -> list:
    return [bars["ts_event"][i] for i in at]


def _scaled(bars: pl.DataFrame, factor: float, rows: range) -> pl.DataFrame:
    inside = pl.int_range(pl.len()).is_in(list(rows))
    return bars.with_columns(pl.when(inside).then(pl.col(c) * factor).otherwise(pl.col(c))
                             for c in ("open", "high", "low", "close"))


def test_a_1000x_spike_is_flagged_and_a_normal_series_is_not():
    frame = _quiet()
    ts = frame["ts_event"]
    assert price_jumps(frame).height == 0
    spiked = _scaled(frame, 1000, range(90, 91))
    jumps = price_jumps(spiked)
    assert jumps["ts_event"].to_list() == ts[90:92].to_list()  # the spike and the return from it
    assert jumps["reason"][0] == "more than 25% from the previous close"
    assert price_jumps(spiked, multiple=1e8).height == 0  # the multiple is configurable
    # a new contract segment starts fresh: a roll gap is not a jump
    later = pl.col("ts_event") >= ts[60]
    rolled = frame.with_columns(
        pl.when(later).then(1).otherwise(0).alias("contract_seq"),
        *(pl.when(later).then(pl.col(c) + 500).otherwise(pl.col(c)) for c in ("open", "high", "low", "close")),
    )
    assert price_jumps(rolled).height == 0


@pytest.mark.parametrize(("factor", "rows"), [
    (1000.0, range(70, 71)),  # 1000x, one bar
    (2.0, range(70, 71)),  # 2x
    (10.0, range(70, 80)),  # a slipped decimal, ten bars long
    (0.1, range(70, 71)),  # and the other way
    (1.03, range(70, 71)),  # one bar 3% up that the next bars do not follow
])
def test_bad_prints_are_flagged_naming_their_first_bar(factor, rows):
    frame = _quiet()
    jumps = price_jumps(_scaled(frame, factor, rows))
    assert jumps.height >= 1 and jumps["ts_event"][0] == frame["ts_event"][rows[0]]
    assert set(jumps["root"]) == {"ES"}


def test_a_news_jump_that_stays_is_no_bad_print_and_one_that_reverts_is():
    """3% in one minute after a quiet hour (600x its median range) is news when the next bars
    trade at the new level, a bad print when they are back where they were."""
    frame = _quiet()
    news = frame.with_columns(pl.when(pl.int_range(pl.len()) >= 70).then(pl.col(c) * 1.03).otherwise(pl.col(c))
                              for c in ("open", "high", "low", "close"))
    assert price_jumps(news).height == 0
    spike = _scaled(frame, 1.03, range(70, 71))
    assert price_jumps(spike)["reason"].to_list() == ["a jump the next bars do not confirm"]
    # a jump on the session's last bar: nothing confirms it
    assert _times(frame, 119) == price_jumps(_scaled(frame, 1.03, range(119, 120)))["ts_event"].to_list()


def test_the_open_of_a_session_is_judged_on_its_own_range():
    """A session opens on what happened while it was closed (a weekend, a hole in the data):
    its gap from the last close of the session before is no bad print."""
    n = 60
    friday = _minutes(n, datetime(2024, 1, 5, 20, 0, tzinfo=UTC))  # trade date Jan 5
    monday = _minutes(n, datetime(2024, 1, 7, 23, 0, tzinfo=UTC))  # trade date Jan 8
    close = [4800.0 + 0.25 * (i % 3) for i in range(n)] + [5100.0 + 0.25 * (i % 3) for i in range(n)]
    frame = _bars(close, pl.concat([friday, monday]), half_range=0.25)
    assert price_jumps(frame).height == 0  # 300 points over the weekend, 600x the minute range
    # the opening bar carries the weekend's move inside it (open at Friday's close): 6% is
    # several daily moves of ES, and still an open
    inside = frame.with_columns(pl.when(pl.int_range(pl.len()) == n).then(4800.0).otherwise(pl.col("open")).alias("open"),
                                pl.when(pl.int_range(pl.len()) == n).then(4800.0).otherwise(pl.col("low")).alias("low"))
    assert price_jumps(inside).height == 0
    # an opening bar far from where the session then trades, or wider than ten daily moves
    off = _scaled(frame, 1.05, range(n, n + 1))
    assert price_jumps(off)["reason"].to_list()[:1] == ["an opening level the next bars do not confirm"]
    wide = frame.with_columns(pl.when(pl.int_range(pl.len()) == n).then(pl.col("high") * 1.2).otherwise(pl.col("high")))
    assert "an opening range beyond 10 typical daily moves" in price_jumps(wide)["reason"].to_list()


def test_a_bar_after_a_hole_is_compared_with_no_close_from_before_it():
    """ES on an FOMC day after a sixteen-hour hole (2024-12-18): the first bar after it is 200
    points from the last close before the hole, and trades on from there."""
    before = _bars([6050.0 + 0.25 * (i % 3) for i in range(60)],
                   _minutes(60, datetime(2024, 12, 18, 4, 0, tzinfo=UTC)), half_range=0.125)
    after = _bars([5850.0 + 0.25 * (i % 5) for i in range(50)],
                  _minutes(50, datetime(2024, 12, 18, 21, 0, tzinfo=UTC)), half_range=1.0)
    frame = pl.concat([before, after])
    assert price_jumps(frame).height == 0
    # the same move one minute after the last bar is a jump, and stays: news
    assert price_jumps(pl.concat([before, after.with_columns(ts_event=_minutes(50, datetime(2024, 12, 18, 5, 0, tzinfo=UTC)))])).height == 0


# (root, tick size, point value, tick value, symbol, its real last trading day)
CME = [
    ("ES", 0.25, 50.0, 12.5, "ESH4", date(2024, 3, 15)),
    ("NQ", 0.25, 20.0, 5.0, "NQM4", date(2024, 6, 21)),
    ("RTY", 0.10, 50.0, 5.0, "RTYZ4", date(2024, 12, 20)),
    ("YM", 1.0, 5.0, 5.0, "YMU4", date(2024, 9, 20)),
    ("MES", 0.25, 5.0, 1.25, "MESH4", date(2024, 3, 15)),
    ("MNQ", 0.25, 2.0, 0.5, "MNQH4", date(2024, 3, 15)),
    ("ZN", 1 / 64, 1000.0, 15.625, "ZNU4", date(2024, 9, 19)),
    ("ZB", 1 / 32, 1000.0, 31.25, "ZBU4", date(2024, 9, 19)),
    ("UB", 1 / 32, 1000.0, 31.25, "UBU4", date(2024, 9, 19)),
    ("ZF", 1 / 128, 1000.0, 7.8125, "ZFZ4", date(2024, 12, 31)),
    ("ZT", 1 / 256, 2000.0, 7.8125, "ZTZ4", date(2024, 12, 31)),
    ("CL", 0.01, 1000.0, 10.0, "CLH4", date(2024, 2, 20)),
    ("NG", 0.001, 10_000.0, 10.0, "NGH4", date(2024, 2, 27)),
    ("RB", 0.0001, 42_000.0, 4.2, "RBH4", date(2024, 2, 29)),
    ("HO", 0.0001, 42_000.0, 4.2, "HOH4", date(2024, 2, 29)),
    ("GC", 0.10, 100.0, 10.0, "GCJ4", date(2024, 4, 26)),
    ("SI", 0.005, 5000.0, 25.0, "SIK4", date(2024, 5, 29)),
    ("HG", 0.0005, 25_000.0, 12.5, "HGK4", date(2024, 5, 29)),
    ("6E", 0.00005, 125_000.0, 6.25, "6EH4", date(2024, 3, 18)),
    ("6J", 0.0000005, 12_500_000.0, 6.25, "6JM4", date(2024, 6, 17)),
    ("6B", 0.0001, 62_500.0, 6.25, "6BU4", date(2024, 9, 16)),
    ("6A", 0.00005, 100_000.0, 5.0, "6AZ4", date(2024, 12, 16)),
    ("6C", 0.00005, 100_000.0, 5.0, "6CH4", date(2024, 3, 19)),
    ("ZC", 0.25, 50.0, 12.5, "ZCH4", date(2024, 3, 14)),
    ("ZS", 0.25, 50.0, 12.5, "ZSF4", date(2024, 1, 12)),
    ("ZW", 0.25, 50.0, 12.5, "ZWN4", date(2024, 7, 12)),
]


@pytest.mark.parametrize(("root", "tick", "point", "tick_value", "symbol", "last_day"), CME)
def test_instrument_table_matches_cme_terms(root, tick, point, tick_value, symbol, last_day):
    s = ROOTS[root]
    assert (s.tick_size, s.multiplier) == (tick, point)
    assert s.tick_value == pytest.approx(tick_value)
    parsed = parse_outright(symbol, date(2024, 1, 2))
    assert parsed is not None and parsed[0] == root
    assert parsed[2] in [" FGHJKMNQUVXZ".index(c) for c in s.contract_months]
    assert expiry_date(*parsed) == last_day


def test_every_root_has_a_known_calendar_and_unique_ids():
    import pandas_market_calendars as mcal

    assert len({s.root_id for s in ROOTS.values()}) == len(ROOTS)
    for name in {s.calendar for s in ROOTS.values()}:
        assert mcal.get_calendar(name).name
    # ids the models and synthetic data were built with never change
    assert [ROOTS[r].root_id for r in ("ES", "NQ", "ZN", "CL", "GC")] == [0, 1, 2, 3, 4]


def test_bars_with_volume_0_do_not_make_a_contract_front():
    """Bars with volume 0 are no sign that a contract trades (issue 39): the nearest contract
    is not the first front when its only bars have volume 0; the one that trades is."""
    d = weekdays(date(2024, 1, 8), 3)
    raw = raw_frame([(day, {"ESH4": 0, "ESM4": 900}) for day in d]).collect()
    cont, rolls = build_continuous(raw.lazy())
    assert rolls.height == 0 and cont["symbol"].unique().to_list() == ["ESM4"]


def test_a_spike_in_a_busy_session_is_judged_against_the_roots_daily_move():
    """ES in its cash session ranges 10 points a minute: a 5% print (240 points, 24x) is no
    jump by the recent range, but it is some four daily moves of ES, and reverts."""
    busy = _bars([4800.0 + 2.5 * (i % 5) for i in range(120)], _minutes(120), half_range=5.0)
    assert price_jumps(busy).height == 0
    spike = _scaled(busy, 1.05, range(70, 71))
    assert price_jumps(spike)["ts_event"].to_list() == _times(busy, 70)
    stays = busy.with_columns(pl.when(pl.int_range(pl.len()) >= 70).then(pl.col(c) * 1.05).otherwise(pl.col(c))
                              for c in ("open", "high", "low", "close"))
    assert price_jumps(stays).height == 0  # news that stays is news, however large
