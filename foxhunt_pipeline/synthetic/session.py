"""CME Globex trading hours and intraday seasonality, vectorised over bar start times.

Globex futures trade Sunday-Friday 17:00-16:00 America/Chicago with a daily
halt 16:00-17:00 CT and the weekend close from Friday 16:00 to Sunday 17:00 CT.
The root's CME calendar in ``pandas_market_calendars`` (the one the known-future inputs
read, mapped by :func:`~foxhunt_pipeline.instruments.sessions.calendar_name`) then
closes a full holiday's whole trade date and ends an early-close trade date (the day after
Thanksgiving, Christmas Eve, Monday holidays...) at that day's ``market_close`` instead of
16:00 CT: no bar starts at or after it until the next session opens at 17:00 CT as usual.
Not modelled: intraday pauses inside a session, and the longer gap after an early close
adds no extra reopening variance. Chicago's
UTC offset is looked up with zoneinfo once per UTC hour, which is exact because
US DST switches on the hour (at 02:00 local, Sunday, while Globex is closed).
"""

from __future__ import annotations

import warnings
from datetime import UTC, date, datetime
from functools import cache, lru_cache
from zoneinfo import ZoneInfo

import numpy as np

from foxhunt_pipeline.instruments.sessions import calendar_name, exchange_calendar

CHICAGO = ZoneInfo("America/Chicago")
NS = 1_000_000_000
DAY_S = 86_400
OPEN_S = 17 * 3600  # session opens 17:00 CT
HALT_S = 16 * 3600  # daily halt / Friday close 16:00 CT
SESSION_S = 23 * 3600
_EPOCH_WEEKDAY = 3  # 1970-01-01 was a Thursday (Monday = 0)

# Regular (pit-hours) session where most of the day's volume trades, CT seconds.
RTH_BY_CLASS: dict[str, tuple[int, int]] = {
    "equity_index": (8 * 3600 + 1800, 15 * 3600 + 900),
    "rates": (7 * 3600 + 1200, 14 * 3600),
    "energy": (8 * 3600, 13 * 3600 + 1800),
    "metals": (7 * 3600 + 1200, 12 * 3600 + 1800),
}


def utc_day_start_ns(day: date) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()) * NS


def chicago_offsets_s(ts_s: np.ndarray) -> np.ndarray:
    """UTC offset of Chicago (seconds) at each UTC instant, via zoneinfo per distinct hour."""
    hours = ts_s // 3600
    uniq, inv = np.unique(hours, return_inverse=True)
    offs = np.array(
        [
            int(
                datetime.fromtimestamp(int(h) * 3600, tz=UTC)
                .astimezone(CHICAGO)
                .utcoffset()
                .total_seconds()
            )  # type: ignore[union-attr]
            for h in uniq
        ],
        dtype=np.int64,
    )
    return offs[inv].reshape(ts_s.shape)


def chicago_clock(ts_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(weekday Monday=0, seconds since local midnight) in America/Chicago."""
    ts_s = np.asarray(ts_ns, dtype=np.int64) // NS
    local = ts_s + chicago_offsets_s(ts_s)
    return (local // DAY_S + _EPOCH_WEEKDAY) % 7, local % DAY_S


def is_trading(ts_ns: np.ndarray) -> np.ndarray:
    """True where a bar starting at ``ts_ns`` lies inside a Globex session."""
    wd, sod = chicago_clock(ts_ns)
    halted = (sod >= HALT_S) & (sod < OPEN_S)
    weekend = (wd == 5) | ((wd == 4) & (sod >= HALT_S)) | ((wd == 6) & (sod < OPEN_S))
    return ~(halted | weekend)


def session_bar_starts(day: date, step_s: int) -> np.ndarray:
    """UTC ns starts of every bar of ``step_s`` seconds in UTC ``day`` that Globex trades."""
    t0 = utc_day_start_ns(day)
    ts = t0 + np.arange(0, DAY_S, step_s, dtype=np.int64) * NS
    return ts[is_trading(ts)]


def _bump(x: np.ndarray, centre: float, width: float) -> np.ndarray:
    return np.exp(-0.5 * ((x - centre) / width) ** 2)


def raw_vol_season(sod: np.ndarray, asset_class: str) -> np.ndarray:
    """Un-normalised intraday volatility shape: quiet overnight, a European-open bump,
    a U across the regular session (spike at the open, rise into the close)."""
    rth_open, rth_close = RTH_BY_CLASS.get(asset_class, RTH_BY_CLASS["equity_index"])
    h = sod.astype(np.float64)
    s = np.full(h.shape, 0.30)
    s += 0.25 * _bump(h, 2.5 * 3600, 3600)  # London open
    s += 0.20 * np.where(h >= OPEN_S, np.exp(-(h - OPEN_S) / 1800.0), 0.0)  # Globex reopen
    rth = (h >= rth_open) & (h < rth_close)
    u = 0.75 + 1.4 * np.exp(-(h - rth_open) / 1500.0) + 0.7 * np.exp(-(rth_close - h) / 1200.0)
    s = np.where(rth, s + u, s)
    after = (h >= rth_close) & (h < HALT_S)
    return np.where(after, s + 0.15, s)


@cache
def _season_norms(asset_class: str, step_s: int) -> tuple[float, float]:
    """Constants that make mean(vol_season**2) == 1 and sum(volume_season) == 1 over one
    full 23-hour session at this bar size."""
    sod = (OPEN_S + np.arange(0, SESSION_S, step_s)) % DAY_S
    s = raw_vol_season(sod, asset_class)
    return float(np.sqrt(np.mean(s**2))), float(np.sum(s**VOLUME_SEASON_POWER))


VOLUME_SEASON_POWER = 1.3


def seasonality(sod: np.ndarray, asset_class: str, step_s: int) -> tuple[np.ndarray, np.ndarray]:
    """(volatility multiplier with unit mean square, share of a session's volume per bar)."""
    vol_norm, volume_norm = _season_norms(asset_class, step_s)
    s = raw_vol_season(sod, asset_class)
    return s / vol_norm, s**VOLUME_SEASON_POWER / volume_norm


def bars_per_session(step_s: int) -> int:
    return SESSION_S // step_s


def trade_days(ts_ns: np.ndarray) -> np.ndarray:
    """CME trade date of each bar as days since the epoch: 17:00 CT rolls to the next day."""
    ts_s = np.asarray(ts_ns, dtype=np.int64) // NS
    local = ts_s + chicago_offsets_s(ts_s)
    return local // DAY_S + (local % DAY_S >= OPEN_S)


@cache
def _holidays(calendar: str) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        holidays = exchange_calendar(calendar).holidays().holidays
    return np.asarray(holidays, dtype="datetime64[D]").astype(np.int64)


def closed_trade_days(root: str) -> np.ndarray:
    """Full-holiday trade dates (days since the epoch) of the root's CME calendar."""
    return _holidays(calendar_name(root))


@lru_cache(maxsize=256)
def _early_closes_in_year(calendar: str, year: int) -> tuple[np.ndarray, np.ndarray]:
    """(trade dates as days since the epoch, close as UTC ns) of the calendar's early closes
    in ``year``: one schedule per calendar and year, so a run reads the calendar a few times."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = exchange_calendar(calendar)
        early = cal.early_closes(cal.schedule(f"{year}-01-01", f"{year}-12-31"))
    days = early.index.to_numpy().astype("datetime64[D]").astype(np.int64)
    close = early["market_close"].dt.tz_convert("UTC").dt.tz_localize(None)
    return days, close.to_numpy().astype("datetime64[ns]").astype(np.int64)


def early_closes(root: str, first_day: int, last_day: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted early-close trade dates (days since the epoch) between ``first_day`` and
    ``last_day`` inclusive, with each one's close in UTC ns, per the root's calendar."""
    calendar = calendar_name(root)
    first_year, last_year = (
        int(np.datetime64(d, "D").astype("datetime64[Y]").astype(np.int64)) + 1970
        for d in (first_day, last_day)
    )
    parts = [_early_closes_in_year(calendar, y) for y in range(first_year, last_year + 1)]
    days = np.concatenate([p[0] for p in parts])
    close = np.concatenate([p[1] for p in parts])
    within = (days >= first_day) & (days <= last_day)
    return days[within], close[within]


def open_for(root: str, ts_ns: np.ndarray) -> np.ndarray:
    """``ts_ns`` less the bars whose trade date is a full holiday for ``root`` and those at
    or after the close of an early-close trade date."""
    if ts_ns.size == 0:
        return ts_ns
    td = trade_days(ts_ns)
    keep = ~np.isin(td, closed_trade_days(root))
    days, close = early_closes(root, int(td.min()), int(td.max()))
    if days.size:
        i = np.minimum(np.searchsorted(days, td), days.size - 1)
        keep &= ~((days[i] == td) & (ts_ns >= close[i]))
    return ts_ns[keep]
