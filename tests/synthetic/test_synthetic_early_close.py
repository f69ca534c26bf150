"""On a CME early-close trade date the generator stops at the close of the root's calendar
(pandas_market_calendars, the calendar the known-future inputs read) and the next session
opens as usual. Closes are read from the calendar here and checked against the values it
was confirmed to state (pandas_market_calendars 5.5); trade dates are recomputed per record
with zoneinfo rather than with the generator's own session code."""

from __future__ import annotations

import warnings
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import numpy as np
import pandas_market_calendars as mcal
import pytest

from foxhunt_pipeline.synthetic.generate import generate, iter_days

CT = ZoneInfo("America/Chicago")
MIN = timedelta(minutes=1)

# root, calendar, early-close trade date, its close as the calendar states it, next open
EARLY_CLOSES = [
    pytest.param(
        "ES",
        "CME_Equity",
        date(2024, 11, 29),
        datetime(2024, 11, 29, 18, 0, tzinfo=UTC),  # 12:00 CST
        datetime(2024, 12, 1, 23, 0, tzinfo=UTC),  # Sunday 17:00 CST
        id="ES-day-after-thanksgiving",
    ),
    pytest.param(
        "ZN",
        "CME_Bond",
        date(2024, 11, 29),
        datetime(2024, 11, 29, 18, 15, tzinfo=UTC),  # 12:15 CST
        datetime(2024, 12, 1, 23, 0, tzinfo=UTC),
        id="ZN-day-after-thanksgiving",
    ),
    pytest.param(
        "ES",
        "CME_Equity",
        date(2024, 7, 3),
        datetime(2024, 7, 3, 17, 0, tzinfo=UTC),  # 12:00 CDT
        datetime(2024, 7, 3, 22, 0, tzinfo=UTC),  # 17:00 CDT, trade date July 4
        id="ES-july-3-summer-time",
    ),
    pytest.param(
        "ZN",
        "CME_Bond",
        date(2024, 12, 24),
        datetime(2024, 12, 24, 18, 15, tzinfo=UTC),
        datetime(2024, 12, 25, 23, 0, tzinfo=UTC),  # Christmas closed, reopens for Dec 26
        id="ZN-christmas-eve",
    ),
]


def _calendar_close(calendar: str, trade_date: date) -> datetime:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = mcal.get_calendar(calendar).schedule(trade_date, trade_date)
    return sched["market_close"].iloc[0].to_pydatetime().astimezone(UTC)


def _bars(root: str, first: date, last: date) -> tuple[np.ndarray, np.ndarray]:
    """(bar start datetimes UTC, CME trade dates) of every record generated for ``root``."""
    ts = np.concatenate(
        [r["ts_event"] for _, r, _ in iter_days((last - first).days + 1, (root,), start=first)]
    )
    starts = np.array([datetime.fromtimestamp(int(t) / 1e9, tz=UTC) for t in ts])
    local = [s.astimezone(CT) for s in starts]
    trade = np.array([t.date() + timedelta(days=1) * (t.hour >= 17) for t in local])
    return starts, trade


@pytest.mark.parametrize(("root", "calendar", "trade_date", "close", "next_open"), EARLY_CLOSES)
def test_no_bars_between_the_early_close_and_the_next_open(
    root: str, calendar: str, trade_date: date, close: datetime, next_open: datetime
) -> None:
    assert _calendar_close(calendar, trade_date) == close
    starts, trade = _bars(root, trade_date - timedelta(days=1), next_open.date())
    on_day = starts[trade == trade_date]
    assert on_day.size > 0
    assert on_day.max() < close
    assert on_day.max() >= close - 5 * MIN, "bars must run up to the early close"
    assert not ((starts >= close) & (starts < next_open)).any()
    assert ((starts >= next_open) & (starts < next_open + 5 * MIN)).any(), "reopens as usual"


@pytest.mark.parametrize("root", ["ES", "ZN"])
def test_a_regular_trade_date_still_runs_to_the_16_00_ct_halt(root: str) -> None:
    trade_date = date(2024, 11, 26)  # the Tuesday before Thanksgiving
    halt = datetime(2024, 11, 26, 16, 0, tzinfo=CT).astimezone(UTC)
    reopen = datetime(2024, 11, 26, 17, 0, tzinfo=CT).astimezone(UTC)
    calendar = {"ES": "CME_Equity", "ZN": "CME_Bond"}[root]
    assert _calendar_close(calendar, trade_date) == halt
    starts, trade = _bars(root, trade_date - timedelta(days=1), trade_date)
    on_day = starts[trade == trade_date]
    assert halt - 5 * MIN <= on_day.max() < halt
    assert not ((starts >= halt) & (starts < reopen)).any()
    assert ((starts >= reopen) & (starts < reopen + 5 * MIN)).any()


def test_landed_files_stop_at_the_early_close(tmp_path) -> None:
    """End to end through the DBN files ``foxhunt generate`` writes."""
    import databento as db

    close = datetime(2024, 11, 29, 18, 0, tzinfo=UTC)
    paths = generate(tmp_path, 1, roots=("ES",), start=date(2024, 11, 29))
    (path,) = paths
    ts = db.DBNStore.from_file(path).to_ndarray()["ts_event"].astype(np.int64)
    close_ns = int(close.timestamp()) * 1_000_000_000
    assert ts.max() < close_ns
    assert ts.max() >= close_ns - 5 * 60 * 1_000_000_000
