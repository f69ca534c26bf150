"""A regular in-session bar grid, so every row is one bar interval after the previous.

Databento omits bars for intervals without trades. Models want a regular time
axis, so we fill the holes, but only where filling is honest:

* a hole is filled only between two consecutive real bars of the same
  (root, contract_seq), the same CME trade session and, where the frame has a
  ``_stretch`` column, the same stretch: more open market without a bar than the
  root's normal no-trade gap (an outage, ``instruments.sessions``) is never filled.
  The trade session runs
  17:00 America/Chicago to 16:00 the next day and takes that next day's date,
  so the daily halt (16:00-17:00 CT), weekends and holiday closures are never
  filled: the last real bar of a session is the last grid row of that session;
* a filled row carries the previous close forward: open = high = low = close,
  volume 0, ``is_filled = True``;
* nothing is extrapolated past the last real bar, so the grid never invents a
  bar after the data ends (filled rows are only created once the next real bar
  of the session is known, exactly as a live system would backfill them).
"""

from __future__ import annotations

import numpy as np
import polars as pl

EXCHANGE_TZ = "America/Chicago"
SESSION_OPEN_HOUR = 17  # CT; the session that opens at 17:00 belongs to the next day
SESSION_MINUTES = 23 * 60  # 17:00 -> 16:00 CT


def session_clock(ts: str = "ts_event") -> pl.Expr:
    """Naive wall-clock time shifted so the session opens at 00:00 (17:00 CT -> 00:00)."""
    local = pl.col(ts).dt.convert_time_zone(EXCHANGE_TZ).dt.replace_time_zone(None)
    return local + pl.duration(hours=24 - SESSION_OPEN_HOUR)


def trade_date_expr(ts: str = "ts_event") -> pl.Expr:
    """CME trade date: 17:00 CT rolls to the next calendar day (DST-safe, wall-clock)."""
    return session_clock(ts).dt.date()


def trade_dates(ts_ns) -> np.ndarray:
    """The CME trade date (ISO string) of each UTC-nanosecond timestamp: how the walk-forward
    cuts its folds."""
    frame = pl.DataFrame({"ts_event": pl.Series(np.asarray(ts_ns, np.int64)).cast(
        pl.Datetime("ns", "UTC"))})
    return frame.select(trade_date_expr().cast(pl.String)).to_series().to_numpy()


def session_minute_expr(ts: str = "ts_event") -> pl.Expr:
    """Minutes since the session opened at 17:00 CT (0 .. 1379 inside a session)."""
    clock = session_clock(ts)
    return clock.dt.hour().cast(pl.Int32) * 60 + clock.dt.minute().cast(pl.Int32)


def regular_grid(bars: pl.DataFrame, bar_seconds: int = 60) -> pl.DataFrame:
    """Fill missing in-session bars; adds ``is_filled``. ``bars`` sorted by (root, ts_event)."""
    if bars.is_empty():
        return bars.with_columns(is_filled=pl.lit(False))
    step_ns = int(bar_seconds) * 1_000_000_000
    ts_ns = pl.col("ts_event").dt.epoch("ns")
    same_session_next = (
        (pl.col("root") == pl.col("root").shift(-1))
        & (pl.col("contract_seq") == pl.col("contract_seq").shift(-1))
        & (pl.col("_td") == pl.col("_td").shift(-1))
    )
    if "_stretch" in bars.columns:
        same_session_next &= pl.col("_stretch") == pl.col("_stretch").shift(-1)
    same_session_next = same_session_next.fill_null(False)
    gap = (ts_ns.shift(-1) - ts_ns) // step_ns
    df = bars.with_columns(_td=trade_date_expr())
    df = df.with_columns(
        _n=pl.when(same_session_next).then(gap.clip(lower_bound=1)).otherwise(1).cast(pl.Int64)
    )
    if int(df["_n"].max()) == 1:  # nothing to fill
        return df.drop("_td", "_n").with_columns(is_filled=pl.lit(False))
    df = df.with_columns(_k=pl.int_ranges(0, pl.col("_n"), dtype=pl.Int64)).explode("_k")
    filled = pl.col("_k") > 0
    close = pl.col("close")
    return df.with_columns(
        ts_event=pl.col("ts_event") + pl.duration(nanoseconds=pl.col("_k") * step_ns),
        open=pl.when(filled).then(close).otherwise(pl.col("open")),
        high=pl.when(filled).then(close).otherwise(pl.col("high")),
        low=pl.when(filled).then(close).otherwise(pl.col("low")),
        volume=pl.when(filled)
        .then(pl.lit(0, dtype=bars.schema["volume"]))
        .otherwise(pl.col("volume")),
        is_filled=filled,
    ).drop("_td", "_n", "_k")
