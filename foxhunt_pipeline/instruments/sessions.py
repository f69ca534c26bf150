"""CME sessions of a root, from its exchange calendar: which trade dates the exchange was
open, so a hole in the data can be told from a weekend or a holiday.

A *stretch* is a run of bars with no missing session: consecutive bars whose trade dates
are equal or have no session of the root's calendar (``pandas_market_calendars``: the
``calendar`` of ``instruments.ROOTS``) strictly between them. A minute without a trade
inside a session is not a hole (Databento omits such bars; ``features.grid`` fills them);
a whole session without a bar is. Returns, targets and windows never span two stretches.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import lru_cache

import numpy as np
import polars as pl

from foxhunt_pipeline.instruments.specs import CALENDAR_OF_CLASS, spec

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


def open_minutes(root: str, start: datetime, end: datetime) -> float:
    """Minutes the root's exchange was open (per its calendar's sessions, breaks taken out)
    between two UTC instants: how long a file's last record may precede its header's end."""
    if end <= start:
        return 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = exchange_calendar(calendar_name(root)).schedule(
            (start - timedelta(days=2)).date().isoformat(), (end + timedelta(days=2)).date().isoformat())
    lo, hi = np.datetime64(start.replace(tzinfo=None), "ns"), np.datetime64(end.replace(tzinfo=None), "ns")

    def utc(col: str) -> np.ndarray:
        return sched[col].dt.tz_convert("UTC").dt.tz_localize(None).to_numpy("datetime64[ns]")

    opens, closes = utc("market_open"), utc("market_close")
    total = np.clip(np.minimum(closes, hi) - np.maximum(opens, lo), np.timedelta64(0, "ns"), None)
    if "break_start" in sched.columns:
        b0, b1 = utc("break_start"), utc("break_end")
        ok = ~(np.isnat(b0) | np.isnat(b1))
        brk = np.clip(np.minimum(b1, hi) - np.maximum(b0, lo), np.timedelta64(0, "ns"), None)
        total = total - np.where(ok, brk, np.timedelta64(0, "ns"))
    return float(total.astype("timedelta64[s]").astype(np.int64).sum()) / 60.0


__all__ = ["Gap", "calendar_name", "exchange_calendar", "gaps", "missing_between", "missing_sessions",
           "open_minutes", "session_dates", "stretch_numbers"]
