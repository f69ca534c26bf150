"""Opt-in market events for the generator: what real data has and a default run never makes.

A default run has none, and its files are byte for byte what they were without this module
(every event is applied only where one is given, and draws no random number). Each event
changes its own UTC instants only, so a longer run still reproduces a shorter one:

* :class:`Outage`: no bars in ``[start, end)`` for the given roots (every root when none
  is named), as when the exchange or the feed stops: the market goes on unseen (the latent
  price keeps moving) and the data has a hole.
* :class:`PriceJump`: scheduled news. The latent price of the root moves by ``size`` (a
  fraction of the price, +0.03 is 3% up) in the bar that starts at ``at``, and stays there:
  every contract of the root jumps, and the bars after it trade at the new level.
* :class:`BadPrint`: the root's outright bars that start at ``at`` print ``factor`` times
  their prices (1000, 2, 0.1 for a slipped decimal, 1.05); the next bars are as they were,
  so the print reverts.
* :class:`HolidaySession`: the session of trade date ``day`` trades at ``volume_share`` of
  its usual volume, as on a holiday: more minutes without a trade (short gaps, no hole).

``parse`` reads the command line's forms (``foxhunt generate --outage ...``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np

NS = 1_000_000_000


def _utc(text: str) -> datetime:
    """An ISO datetime; one without a zone is UTC."""
    out = datetime.fromisoformat(text.strip())
    return out if out.tzinfo is not None else out.replace(tzinfo=UTC)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ns(when: datetime) -> int:
    return (when - _EPOCH) // timedelta(microseconds=1) * 1000


@dataclass(frozen=True)
class Outage:
    start: datetime
    end: datetime
    roots: tuple[str, ...] = ()  # every root when empty

    def hides(self, root: str, ts_ns: np.ndarray) -> np.ndarray:
        if self.roots and root not in self.roots:
            return np.zeros(ts_ns.shape, dtype=bool)
        return (ts_ns >= _ns(self.start)) & (ts_ns < _ns(self.end))


@dataclass(frozen=True)
class PriceJump:
    root: str
    at: datetime
    size: float  # log move of the latent price, as a fraction (0.03: 3% up)


@dataclass(frozen=True)
class BadPrint:
    root: str
    at: datetime
    factor: float  # the printed prices are factor x the true ones


@dataclass(frozen=True)
class HolidaySession:
    day: date  # the CME trade date
    volume_share: float = 0.05


@dataclass(frozen=True)
class MarketEvents:
    """The events of one generate call (none by default)."""

    outages: tuple[Outage, ...] = ()
    jumps: tuple[PriceJump, ...] = ()
    bad_prints: tuple[BadPrint, ...] = ()
    holidays: tuple[HolidaySession, ...] = field(default=())

    def __bool__(self) -> bool:
        return bool(self.outages or self.jumps or self.bad_prints or self.holidays)

    def jump_ticks(self, root: str, ts_ns: np.ndarray, spot_ticks: int) -> np.ndarray:
        """Extra ticks of the latent price in each bar of ``ts_ns`` (a root's day)."""
        out = np.zeros(ts_ns.shape, dtype=np.int64)
        for j in self.jumps:
            if j.root == root:
                out[ts_ns == _ns(j.at)] += round(spot_ticks * (np.exp(j.size) - 1.0))
        return out

    def volume_share(self, trade_days: np.ndarray) -> np.ndarray | None:
        """The share of usual volume of each bar (``trade_days``: days since the epoch), or
        None when no holiday session is given."""
        if not self.holidays:
            return None
        share = np.ones(trade_days.shape, dtype=np.float64)
        for h in self.holidays:
            share[trade_days == np.datetime64(h.day, "D").astype(np.int64)] = h.volume_share
        return share

    def as_config(self) -> dict[str, Any]:
        """The sidecar's record of the events (only written when there are some)."""
        return {
            "outages": [{"start": o.start.isoformat(), "end": o.end.isoformat(), "roots": list(o.roots)}
                        for o in self.outages],
            "price_jumps": [{"root": j.root, "at": j.at.isoformat(), "size": j.size} for j in self.jumps],
            "bad_prints": [{"root": b.root, "at": b.at.isoformat(), "factor": b.factor} for b in self.bad_prints],
            "holiday_sessions": [{"day": h.day.isoformat(), "volume_share": h.volume_share}
                                 for h in self.holidays],
        }


def apply_to_records(events: MarketEvents, root: str, recs: np.ndarray, tick_fixed: int,
                     spread_ids: set[int]) -> np.ndarray:
    """A root's day of records after the outages (rows dropped) and bad prints (prices of
    its outrights scaled, on the tick grid) that concern it."""
    if not events or recs.size == 0:
        return recs
    ts = recs["ts_event"].astype(np.int64)
    hidden = np.zeros(recs.shape, dtype=bool)
    for o in events.outages:
        hidden |= o.hides(root, ts)
    out = recs[~hidden].copy()
    for b in events.bad_prints:
        if b.root != root:
            continue
        at = (out["ts_event"].astype(np.int64) == _ns(b.at)) & ~np.isin(out["instrument_id"], list(spread_ids))
        for col in ("open", "high", "low", "close"):
            out[col][at] = np.round(out[col][at] * b.factor / tick_fixed).astype(np.int64) * tick_fixed
    return out


def _root_and_time(text: str) -> tuple[str, datetime, str]:
    """``ROOT@ISO-TIME:VALUE`` -> (root, time, value)."""
    root, _, rest = text.partition("@")
    when, _, value = rest.rpartition(":")
    if not root or not when or not value:
        raise ValueError(f"{text!r}: expected ROOT@ISO-TIME:VALUE, e.g. CL@2024-01-10T13:30:+3%")
    return root.strip().upper(), _utc(when), value.strip()


def _fraction(value: str) -> float:
    return float(value.removesuffix("%")) / 100 if value.endswith("%") else float(value)


def parse(outages: tuple[str, ...] = (), news: tuple[str, ...] = (), bad_prints: tuple[str, ...] = (),
          holidays: tuple[str, ...] = ()) -> MarketEvents:
    """The command line's forms: outage ``START/END`` or ``START/END@ES,CL`` (ISO times, UTC
    when zoneless); news ``CL@2024-01-10T13:30:+3%``; bad print ``ES@2024-01-10T15:00:1000``
    (the factor); holiday session ``2024-01-12`` or ``2024-01-12:0.05`` (the volume share)."""
    out, jumps, prints, days = [], [], [], []
    for text in outages:
        span, _, roots = text.partition("@")
        start, sep, end = span.partition("/")
        if not sep:
            raise ValueError(f"{text!r}: expected START/END[@ROOTS], e.g. 2024-01-10T08:00/2024-01-10T14:00")
        o = Outage(_utc(start), _utc(end), tuple(r.strip().upper() for r in roots.split(",") if r.strip()))
        if o.end <= o.start:
            raise ValueError(f"{text!r}: the outage ends before it starts")
        out.append(o)
    for text in news:
        root, when, value = _root_and_time(text)
        jumps.append(PriceJump(root, when, _fraction(value)))
    for text in bad_prints:
        root, when, value = _root_and_time(text)
        factor = float(value.removeprefix("x"))
        if factor <= 0:
            raise ValueError(f"{text!r}: the factor must be positive")
        prints.append(BadPrint(root, when, factor))
    for text in holidays:
        day, _, share = text.partition(":")
        days.append(HolidaySession(date.fromisoformat(day.strip()), float(share) if share else 0.05))
    return MarketEvents(tuple(out), tuple(jumps), tuple(prints), tuple(days))


__all__ = ["BadPrint", "HolidaySession", "MarketEvents", "Outage", "PriceJump", "apply_to_records", "parse"]
