"""CME sessions of a root, from its exchange calendar: when the exchange was open, so a
hole in the data can be told from a weekend, a holiday, the daily halt or a quiet minute.

A *hole* is more open market without a bar than the root's normal no-trade gap
(:func:`quiet_limit`: ``quiet_minutes`` of ``instruments.ROOTS``, by asset class), counted
on the root's exchange calendar (``pandas_market_calendars``, breaks taken out): a whole
missing session, or hours of an outage inside one. A minute or two without a trade is no
hole (Databento omits such bars; ``features.grid`` fills them). A *stretch* is a run of a
series' bars with no hole between consecutive ones (:func:`new_stretch`): returns,
targets, windows and features never span two stretches.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache

import numpy as np
import polars as pl

from foxhunt_pipeline.instruments.rolls import trade_date
from foxhunt_pipeline.instruments.specs import CALENDAR_OF_CLASS, QUIET_MINUTES_OF_CLASS, spec

#: the calendar is evaluated once per name over this many years either side of the data
_YEAR_PAD = 1


def calendar_name(root: str) -> str:
    """The root's exchange calendar, from the instrument table (by asset class if unset)."""
    s = spec(root)
    return s.calendar or CALENDAR_OF_CLASS[s.asset_class]


@lru_cache(maxsize=16)
def exchange_calendar(name: str):
    import pandas_market_calendars as mcal

    return mcal.get_calendar(name)


@lru_cache(maxsize=64)
def _sessions(name: str, first_year: int, last_year: int) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        days = exchange_calendar(name).valid_days(f"{first_year}-01-01", f"{last_year}-12-31")
    return np.asarray([d.date() for d in days], dtype="datetime64[D]")


def session_dates(root: str, first: date, last: date) -> np.ndarray:
    """Sorted trade dates (``datetime64[D]``) the root's exchange was open, at least
    ``first`` .. ``last`` (whole calendar years around them)."""
    return _sessions(calendar_name(root), first.year - _YEAR_PAD, last.year + _YEAR_PAD)


def missing_between(root: str, before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Sessions of ``root`` strictly between each pair of trade dates (``datetime64[D]``
    arrays, ``before[i] <= after[i]``): 0 for the same or the next session."""
    before = np.asarray(before, dtype="datetime64[D]")
    after = np.asarray(after, dtype="datetime64[D]")
    if before.size == 0:
        return np.zeros(0, dtype=np.int64)
    lo = before.min().astype(object)
    hi = after.max().astype(object)
    sessions = session_dates(root, lo, hi)
    return np.maximum(
        np.searchsorted(sessions, after, side="left") - np.searchsorted(sessions, before, side="right"), 0
    ).astype(np.int64)


def missing_sessions(root: str, before: date, after: date) -> int:
    """How many sessions of ``root`` lie strictly between two trade dates."""
    return int(missing_between(root, np.asarray([before], "datetime64[D]"),
                               np.asarray([after], "datetime64[D]"))[0])


def stretch_numbers(dates: pl.DataFrame, date_col: str = "_td") -> pl.DataFrame:
    """``dates``' distinct (root, date) with ``_stretch`` (Int32): 0 from each root's first
    date, +1 at every date with a missing session before it (since the root's previous
    date). Join it back on (root, date) to cut a frame into stretches."""
    out = []
    for (root,), g in dates.select("root", date_col).unique().sort("root", date_col).partition_by(
        "root", as_dict=True, maintain_order=True
    ).items():
        days = g[date_col].to_numpy().astype("datetime64[D]")
        gap = np.zeros(days.size, dtype=bool)
        if days.size > 1:
            gap[1:] = missing_between(str(root), days[:-1], days[1:]) > 0
        out.append(g.with_columns(_stretch=pl.Series(np.cumsum(gap), dtype=pl.Int32)))
    if not out:
        return dates.select("root", date_col).head(0).with_columns(_stretch=pl.lit(0, pl.Int32))
    return pl.concat(out, how="vertical")


@dataclass(frozen=True)
class Gap:
    """A hole in one root's data: the last trade date before it, the first after it, and
    how many sessions of the root's calendar lie between them."""

    root: str
    last_before: date
    first_after: date
    missing: int

    def __str__(self) -> str:
        return (f"{self.root} {self.last_before} .. {self.first_after} "
                f"({self.missing} missing session{'s' if self.missing != 1 else ''})")


def gaps(root: str, dates: list[date] | np.ndarray, at_least: int = 1) -> list[Gap]:
    """The holes of at least ``at_least`` missing sessions between consecutive ``dates``."""
    days = np.unique(np.asarray(dates, dtype="datetime64[D]"))
    if days.size < 2:
        return []
    missing = missing_between(root, days[:-1], days[1:])
    return [Gap(root, days[i].astype(object), days[i + 1].astype(object), int(missing[i]))
            for i in np.flatnonzero(missing >= at_least)]


def _epoch_ns(t: datetime) -> int:
    """Nanoseconds since the epoch of an instant (a naive one is UTC)."""
    aware = t if t.tzinfo is not None else t.replace(tzinfo=UTC)
    return (aware - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) * 1000


def open_minutes(root: str, start: datetime, end: datetime) -> float:
    """Minutes the root's exchange was open (per its calendar's sessions, breaks taken out)
    between two UTC instants: how long a file's last record may precede its header's end.
    The calendar's intervals are evaluated once per year span (:func:`open_ns_between`), not
    per call: ingest asks once per file."""
    if end <= start:
        return 0.0
    ns = [np.asarray([_epoch_ns(t)]) for t in (start, end)]
    return float(open_ns_between(root, *ns)[0]) / MINUTE_NS


def quiet_limit(root: str) -> int:
    """Minutes of open market the root normally goes without a trade; longer is a hole."""
    s = spec(root)
    return int(s.quiet_minutes or QUIET_MINUTES_OF_CLASS[s.asset_class])


@lru_cache(maxsize=32)
def _open_intervals(name: str, first_year: int, last_year: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, lengths, open time before each start) of the calendar's open intervals in
    UTC ns, breaks taken out: what :func:`open_ns_between` integrates."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = exchange_calendar(name).schedule(f"{first_year}-01-01", f"{last_year}-12-31")

    def utc(col: str) -> np.ndarray:
        return sched[col].dt.tz_convert("UTC").dt.tz_localize(None).to_numpy("datetime64[ns]").astype(np.int64)

    opens, closes = utc("market_open"), utc("market_close")
    starts, ends = [opens], [closes]
    if "break_start" in sched.columns:
        b0, b1 = utc("break_start"), utc("break_end")
        nat = np.iinfo(np.int64).min
        brk = (b0 != nat) & (b1 != nat) & (b1 > b0)
        ends[0] = np.where(brk, b0, closes)  # open .. break, then break end .. close
        starts.append(b1[brk])
        ends.append(closes[brk])
    start, end = np.concatenate(starts), np.concatenate(ends)
    order = np.argsort(start, kind="stable")
    start, length = start[order], np.maximum(end[order] - start[order], 0)
    before = np.concatenate(([0], np.cumsum(length)[:-1]))
    return start, length, before


def _open_ns_until(name: str, t: np.ndarray, years: tuple[int, int]) -> np.ndarray:
    start, length, before = _open_intervals(name, *years)
    k = np.searchsorted(start, t, side="right") - 1
    inside = np.clip(t - start[np.maximum(k, 0)], 0, length[np.maximum(k, 0)])
    return np.where(k >= 0, before[np.maximum(k, 0)] + inside, 0)


def open_ns_between(root: str, start_ns: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
    """Nanoseconds the root's exchange was open (per its calendar, breaks taken out) between
    each pair of UTC instants (int64 ns arrays); 0 where ``end <= start``."""
    start_ns = np.asarray(start_ns, dtype=np.int64)
    end_ns = np.asarray(end_ns, dtype=np.int64)
    if start_ns.size == 0:
        return np.zeros(0, dtype=np.int64)
    span = np.asarray([min(start_ns.min(), end_ns.min()), max(start_ns.max(), end_ns.max())])
    lo, hi = span.astype("datetime64[ns]").astype("datetime64[Y]").astype(np.int64) + 1970
    years = (int(lo) - _YEAR_PAD, int(hi) + _YEAR_PAD)
    name = calendar_name(root)
    return np.maximum(_open_ns_until(name, end_ns, years) - _open_ns_until(name, start_ns, years), 0)


MINUTE_NS = 60 * 10**9


def new_stretch(frame: pl.DataFrame, by: tuple[str, ...] = ("root", "contract_seq"),
                bar_seconds: int = 60) -> np.ndarray:
    """For each row of ``frame`` (``root``, ``ts_event`` and ``by``; each group's rows in
    time order): True where a stretch starts, i.e. the first row of its group, or a row
    after more than the root's :func:`quiet_limit` minutes of open market without a bar
    (from the end of the group's previous bar): a missing session, an outage, data cut
    short at a session's end."""
    n = frame.height
    out = np.ones(n, dtype=bool)
    if n == 0:
        return out
    ts = pl.col("ts_event").dt.epoch("ns")
    cols = frame.select(pl.col("root"), ts.alias("_t"), ts.shift(1).over(list(by)).alias("_p"))
    has_prev = cols["_p"].is_not_null().to_numpy()
    prev = cols["_p"].fill_null(0).to_numpy()
    t = cols["_t"].to_numpy()
    for root in cols["root"].unique().to_list():
        idx = np.flatnonzero((cols["root"] == root).to_numpy() & has_prev)
        if idx.size:
            quiet = open_ns_between(str(root), prev[idx] + bar_seconds * 10**9, t[idx])
            out[idx] = quiet > quiet_limit(str(root)) * MINUTE_NS
    return out


@dataclass(frozen=True)
class Hole:
    """More open market without a bar than the root's normal no-trade gap, inside a session
    or at its edge (a whole missing session is a :class:`Gap`): the last bar before it, the
    first after it and the minutes the exchange was open in between."""

    root: str
    last_before: datetime
    first_after: datetime
    open_minutes: float

    def __str__(self) -> str:
        return (f"{self.root} {self.last_before:%Y-%m-%d %H:%M} .. {self.first_after:%Y-%m-%d %H:%M} UTC "
                f"({self.open_minutes:.0f} open minutes without a bar)")


def session_holes(frame: pl.DataFrame, starts: np.ndarray, bar_seconds: int = 60,
                  by: tuple[str, ...] = ("root", "contract_seq")) -> list[Hole]:
    """The holes in front of ``frame``'s rows where :func:`new_stretch` (``starts``) cut a
    stretch and no whole session is missing: an outage or a cut inside a session."""
    prev = frame.select(pl.col("ts_event").shift(1).over(list(by)))["ts_event"]
    rows = np.flatnonzero(starts & prev.is_not_null().to_numpy())
    out: list[Hole] = []
    if rows.size == 0:
        return out
    roots = frame["root"].to_numpy()[rows]
    after = frame["ts_event"].gather(rows)
    before = prev.gather(rows)
    days_a = before.to_frame().select(trade_date(pl.col("ts_event")))["ts_event"].to_numpy().astype("datetime64[D]")
    days_b = after.to_frame().select(trade_date(pl.col("ts_event")))["ts_event"].to_numpy().astype("datetime64[D]")
    for root in np.unique(roots):
        mine = np.flatnonzero(roots == root)
        whole = missing_between(str(root), days_a[mine], days_b[mine]) > 0
        a_ns = before.gather(mine).dt.epoch("ns").to_numpy()
        b_ns = after.gather(mine).dt.epoch("ns").to_numpy()
        quiet = open_ns_between(str(root), a_ns + bar_seconds * 10**9, b_ns) / MINUTE_NS
        for j in np.flatnonzero(~whole):
            out.append(Hole(str(root), before[int(mine[j])], after[int(mine[j])], float(quiet[j])))
    return sorted(out, key=lambda h: (h.root, h.last_before))


__all__ = ["Gap", "Hole", "calendar_name", "exchange_calendar", "gaps", "missing_between", "missing_sessions",
           "new_stretch", "open_minutes", "open_ns_between", "quiet_limit", "session_dates", "session_holes",
           "stretch_numbers"]
