"""Known-future inputs (``k_*``): functions of the timestamp, the root's exchange calendar
and the front contract's expiry only, so they are known for future steps as well as past.

Holidays and early closes come from ``pandas_market_calendars`` (CME_Equity, CME_Bond,
CMEGlobex_Energy, CMEGlobex_Metals: the Globex sessions 17:00-16:00 CT, i.e. 23:00-22:00
UTC in winter and 22:00-21:00 UTC in summer). The calendar is evaluated once per
distinct trade date and joined to the rows, never per row.
"""

from __future__ import annotations

import math
import warnings
from datetime import date, timedelta
from functools import lru_cache

import polars as pl

from foxhunt_pipeline.features.grid import EXCHANGE_TZ, SESSION_MINUTES, SESSION_OPEN_HOUR
from foxhunt_pipeline.instruments.sessions import calendar_name, exchange_calendar
from foxhunt_pipeline.instruments.specs import CALENDAR_OF_CLASS, spec

CALENDAR_BY_ASSET_CLASS = CALENDAR_OF_CLASS  # the table's default per asset class
# Days before expiry when front-month volume usually moves to the next contract: an
# approximation (equity: the Thursday a week before expiry; rates and metals: before
# first notice day at the end of the prior month; crude and FX: about a week before
# expiry; grains: before first notice day, about a month before expiry).
ROLL_LEAD_DAYS = {"equity_index": 8, "rates": 35, "energy": 7, "metals": 33, "fx": 7,
                  "agriculture": 30}
REGULAR_CLOSE_MINUTE = 16 * 60  # 16:00 CT
RTH_OPEN_MINUTE, RTH_CLOSE_MINUTE = 8 * 60 + 30, 15 * 60  # US cash session, CT

KNOWN_NAMES: tuple[str, ...] = (
    "k_minute_of_day_sin",
    "k_minute_of_day_cos",
    "k_day_of_week_sin",
    "k_day_of_week_cos",
    "k_session_elapsed_frac",
    "k_session_remaining_frac",
    "k_rth",
    "k_early_close",
    "k_holiday",
    "k_pre_holiday",
    "k_post_holiday",
    "k_log_days_to_expiry",
    "k_log_days_to_roll",
    "k_expiry_week",
)


def session_table(root: str, first: date, last: date) -> pl.DataFrame:
    """One row per weekday trade date from a week before ``first`` to a week after ``last``:
    close time (UTC) and holiday / early-close flags. Cut from the rows of whole calendar
    years, computed once per calendar (the features of a date range compute one table per
    contract segment, ~20 ms each); only a row at either end of the cut can differ from a
    table of the range alone (its neighbour outside the range), and no row of [first,
    last] is at either end."""
    lo, hi = first - timedelta(days=7), last + timedelta(days=7)
    return _years_table(calendar_name(root), lo.year, hi.year).filter(pl.col("_td").is_between(lo, hi))


@lru_cache(maxsize=32)
def _years_table(calendar: str, first_year: int, last_year: int) -> pl.DataFrame:
    return session_rows(calendar, date(first_year, 1, 1) - timedelta(days=7),
                        date(last_year, 12, 31) + timedelta(days=7))


def session_rows(calendar: str, lo: date, hi: date) -> pl.DataFrame:
    """The session table's rows of the weekdays in [lo, hi], computed from ``calendar``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = exchange_calendar(calendar).schedule(lo.isoformat(), hi.isoformat())
    open_days = pl.DataFrame(
        {
            "_td": [d.date() for d in sched.index],
            "_close": pl.Series(sched["market_close"].dt.tz_convert("UTC").dt.tz_localize(None))
            .dt.cast_time_unit("ns")
            .dt.replace_time_zone("UTC"),
        }
    )
    days = pl.DataFrame({"_td": pl.date_range(lo, hi, "1d", eager=True)}).filter(
        pl.col("_td").dt.weekday() <= 5
    )
    default_close = (
        (pl.col("_td").cast(pl.Datetime("ns")) + pl.duration(minutes=REGULAR_CLOSE_MINUTE))
        .dt.replace_time_zone(EXCHANGE_TZ, ambiguous="earliest")
        .dt.convert_time_zone("UTC")
    )
    close_local = pl.col("_close").dt.convert_time_zone(EXCHANGE_TZ)
    t = days.join(open_days, on="_td", how="left").with_columns(
        _holiday=pl.col("_close").is_null(),
        _early=(close_local.dt.hour().cast(pl.Int32) * 60 + close_local.dt.minute().cast(pl.Int32))
        < REGULAR_CLOSE_MINUTE,
    )
    full = ~(pl.col("_holiday") | pl.col("_early").fill_null(False))
    return t.with_columns(
        _close=pl.coalesce(pl.col("_close"), default_close).cast(pl.Datetime("ns", "UTC")),
        _early=pl.col("_early").fill_null(False),
        _pre=~full.shift(-1).fill_null(True),
        _post=~full.shift(1).fill_null(True),
    ).select("_td", "_close", "_holiday", "_early", "_pre", "_post")


def known_exprs(root: str) -> list[pl.Expr]:
    """Expressions over ``ts_event``, ``expiry``, ``_td`` (trade date), ``_sm`` (session
    minute) and the joined session table; all Float32."""
    two_pi = 2 * math.pi
    sm = pl.col("_sm").cast(pl.Float64)
    minute_of_day = (sm + SESSION_OPEN_HOUR * 60) % 1440
    dow = (pl.col("_td").dt.weekday() - 1).cast(pl.Float64)  # Monday = 0
    to_close = ((pl.col("_close") - pl.col("ts_event")).dt.total_seconds() / 60.0).clip(0.0)
    days_to_expiry = (pl.col("expiry") - pl.col("_td")).dt.total_days().cast(pl.Float64).clip(0.0)
    lead = ROLL_LEAD_DAYS[spec(root).asset_class]
    days_to_roll = (days_to_expiry - lead).clip(0.0)
    exprs = {
        "k_minute_of_day_sin": (two_pi * minute_of_day / 1440).sin(),
        "k_minute_of_day_cos": (two_pi * minute_of_day / 1440).cos(),
        "k_day_of_week_sin": (two_pi * dow / 7).sin(),
        "k_day_of_week_cos": (two_pi * dow / 7).cos(),
        "k_session_elapsed_frac": sm / SESSION_MINUTES,
        "k_session_remaining_frac": to_close / SESSION_MINUTES,
        "k_rth": ((minute_of_day >= RTH_OPEN_MINUTE) & (minute_of_day < RTH_CLOSE_MINUTE)),
        "k_early_close": pl.col("_early"),
        "k_holiday": pl.col("_holiday"),
        "k_pre_holiday": pl.col("_pre"),
        "k_post_holiday": pl.col("_post"),
        "k_log_days_to_expiry": days_to_expiry.log1p(),
        "k_log_days_to_roll": days_to_roll.log1p(),
        "k_expiry_week": days_to_expiry <= 7,
    }
    assert tuple(exprs) == KNOWN_NAMES
    return [e.cast(pl.Float32).alias(k) for k, e in exprs.items()]


def with_known_inputs(df: pl.DataFrame, root: str) -> pl.DataFrame:
    """Join the per-date session table (``_td`` must be present) and add the ``k_*`` columns."""
    if df.is_empty():
        return df.with_columns([pl.lit(None, dtype=pl.Float32).alias(k) for k in KNOWN_NAMES])
    table = session_table(root, df["_td"].min(), df["_td"].max())
    out = df.join(table, on="_td", how="left", maintain_order="left")
    out = out.with_columns(
        pl.col("_holiday").fill_null(True),  # a weekend trade date: not a scheduled session
        pl.col("_early", "_pre", "_post").fill_null(False),
        pl.col("_close").fill_null(pl.col("ts_event")),
    )
    return out.with_columns(known_exprs(root)).drop("_close", "_holiday", "_early", "_pre", "_post")
