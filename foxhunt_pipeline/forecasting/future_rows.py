"""Known-future rows after the newest bar: what a model's ``horizon`` known inputs are when
the next bars have not happened yet.

A forecaster reads the known inputs (``k_*``: calendar, session, days to expiry) of the
``horizon`` bars after its origin. Those are functions of the clock and the exchange calendar
only (``features.calendar_inputs``), so they exist before the bars do: this module builds
them for the scheduled bar starts after each root's last row (the next minute while the
session is open, then the next session's open after the daily halt, a weekend or a holiday),
so the newest bars of a date get a forecast without waiting for the next date, and a
forecast never depends on whether later rows are stored (the causality test: cut the
history after a bar and its forecast stays the same).
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import polars as pl

from foxhunt_pipeline.features.calendar_inputs import KNOWN_NAMES, session_table, with_known_inputs
from foxhunt_pipeline.features.grid import EXCHANGE_TZ, session_minute_expr, trade_date_expr
from foxhunt_pipeline.instruments.rolls import contract_expiry

FUTURE = "_future"


def _trade_date(t: datetime):
    return (t.astimezone(ZoneInfo(EXCHANGE_TZ)) + timedelta(hours=7)).date()


def next_bar_starts(last: datetime, root: str, n: int, bar_seconds: int = 60) -> list[datetime]:
    """The ``n`` scheduled bar starts after ``last`` (UTC): the next bar while the root's
    session is open, else the first bar of its next session (17:00 CT the evening before a
    trade date with a session)."""
    ct = ZoneInfo(EXCHANGE_TZ)
    td = _trade_date(last)
    table = session_table(root, td, td + timedelta(days=14))
    close = dict(zip(table["_td"].to_list(), table["_close"].to_list(), strict=True))
    holiday = dict(zip(table["_td"].to_list(), table["_holiday"].to_list(), strict=True))

    def next_open(day) -> datetime:
        """17:00 CT the evening before the first trade date after ``day`` with a session."""
        nxt = day + timedelta(days=1)
        while holiday.get(nxt, True):  # weekends are not in the table
            nxt += timedelta(days=1)
        return datetime.combine(nxt - timedelta(days=1), time(17), tzinfo=ct).astimezone(UTC)

    out, t, step = [], last, timedelta(seconds=bar_seconds)
    while len(out) < n:
        t = t + step
        day = _trade_date(t)
        if holiday.get(day, True) or t >= close[day]:
            t = next_open(day)
        out.append(t)
    return out


def with_future_rows(frame: pl.DataFrame, horizon: int, bar_seconds: int = 60) -> pl.DataFrame:
    """``frame`` (features rows sorted by root, ts_event; ``symbol`` optional) and, after each
    root's last row, ``horizon`` rows at the next scheduled bar starts with their ``k_*`` from
    the calendar; their other inputs repeat the last row (never read as history by a window
    ending at or before it). Column ``_future`` says which rows are made up."""
    known = [c for c in frame.columns if c in KNOWN_NAMES]
    pads = []
    for part in frame.partition_by("root", maintain_order=True):
        last = part.row(part.height - 1, named=True)
        root = str(last["root"])
        starts = next_bar_starts(last["ts_event"], root, horizon, bar_seconds)
        symbol = last.get("symbol")
        expiry = (contract_expiry(root, symbol, _trade_date(last["ts_event"]))
                  if symbol else None)
        cal = pl.DataFrame({"ts_event": pl.Series(starts).cast(pl.Datetime("ns", "UTC"))})
        cal = cal.with_columns(_td=trade_date_expr(), _sm=session_minute_expr(),
                               expiry=pl.lit(expiry, dtype=pl.Date))
        cal = with_known_inputs(cal, root).select("ts_event", *known)
        repeat = part.tail(1).select(pl.exclude("ts_event", *known)).select(
            pl.all().repeat_by(horizon).explode())
        pad = pl.concat([cal, repeat], how="horizontal").with_columns(pl.lit(True).alias(FUTURE))
        for c in (c for c in pad.columns if c.startswith("y_")):
            pad = pad.with_columns(pl.lit(None, dtype=frame.schema[c]).alias(c))
        if "is_filled" in pad.columns:
            pad = pad.with_columns(pl.lit(True).alias("is_filled"))
        pads.append(pad.select(frame.columns + [FUTURE]).cast(dict(frame.schema)))
    out = pl.concat([frame.with_columns(pl.lit(False).alias(FUTURE)), *pads], how="vertical")
    return out.sort("root", "ts_event", maintain_order=True)


__all__ = ["FUTURE", "next_bar_starts", "with_future_rows"]
