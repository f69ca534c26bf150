"""Small continuous_bars frames built directly (docs/contracts.md), for the feature tests."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import numpy as np
import polars as pl

from foxhunt_pipeline.instruments.specs import ROOTS


def session_minutes(trade_day: date, bar_seconds: int = 60) -> pl.Series:
    """Bar open times of one CME session (17:00 CT the evening before -> 16:00 CT), in UTC."""
    start = datetime(trade_day.year, trade_day.month, trade_day.day) - timedelta(hours=7)
    ts = pl.datetime_range(
        start,
        start + timedelta(hours=23) - timedelta(seconds=bar_seconds),
        f"{bar_seconds}s",
        eager=True,
        time_zone="America/Chicago",
    )
    return ts.dt.convert_time_zone("UTC").dt.cast_time_unit("ns")


def make_continuous(
    days: int = 3,
    roots: tuple[str, ...] = ("ES", "ZN"),
    start: date = date(2024, 3, 11),
    roll_after_day: int | None = 1,
    missing_frac: float = 0.1,
    constant_minutes: int = 120,
    session_fraction: float = 1.0,
    seed: int = 0,
) -> pl.DataFrame:
    """A few trade days of minute bars per root, some minutes missing (no trade), a
    constant-price stretch on the first day, a roll (contract_seq 0 -> 1) after
    ``roll_after_day`` trade days. ``session_fraction`` keeps only the first part of each
    session, to make small frames."""
    rng = np.random.default_rng(seed)
    trade_days: list[date] = []
    d = start
    while len(trade_days) < days:
        if d.weekday() < 5:
            trade_days.append(d)
        d += timedelta(days=1)
    frames = []
    for root in roots:
        sp = ROOTS[root]
        parts = []
        for i, td in enumerate(trade_days):
            ts = session_minutes(td)
            ts = ts.head(max(1, int(len(ts) * session_fraction)))
            parts.append(pl.DataFrame({"ts_event": ts, "_day": [i] * len(ts)}))
        df = pl.concat(parts)
        n = df.height
        keep = rng.random(n) >= missing_frac
        keep[0] = True
        sigma = sp.daily_vol / np.sqrt(1380)
        ret = rng.standard_normal(n) * sigma
        ret[:constant_minutes] = 0.0  # a constant-price stretch
        close = sp.price_level * np.exp(np.cumsum(ret))
        close = np.round(close / sp.tick_size) * sp.tick_size
        open_ = np.concatenate([[close[0]], close[:-1]])
        spread = np.abs(rng.standard_normal(n)) * sigma * sp.price_level
        spread[:constant_minutes] = 0.0
        high = np.maximum(open_, close) + np.round(spread / sp.tick_size) * sp.tick_size
        low = np.minimum(open_, close) - np.round(spread / sp.tick_size) * sp.tick_size
        vol = rng.integers(1, 500, n).astype(np.uint64)
        day = df["_day"].to_numpy()
        seq = np.where(day > (roll_after_day if roll_after_day is not None else days), 1, 0).astype(
            np.int32
        )
        expiry = [date(2024, 3, 15) if s == 0 else date(2024, 6, 21) for s in seq]
        symbol = [f"{root}H4" if s == 0 else f"{root}M4" for s in seq]
        frames.append(
            pl.DataFrame(
                {
                    "ts_event": df["ts_event"],
                    "rtype": pl.Series([33] * n, dtype=pl.UInt8),
                    "publisher_id": pl.Series([1] * n, dtype=pl.UInt16),
                    "instrument_id": pl.Series(
                        np.where(seq == 0, 100, 200) + sp.root_id, dtype=pl.UInt32
                    ),
                    "symbol": symbol,
                    "root": [root] * n,
                    "open": open_,
                    "high": high,
                    "low": low,
                    "close": close,
                    "volume": pl.Series(vol, dtype=pl.UInt64),
                    "contract_seq": pl.Series(seq, dtype=pl.Int32),
                    "expiry": pl.Series(expiry, dtype=pl.Date),
                }
            ).filter(pl.Series(keep))
        )
    return pl.concat(frames).sort("root", "ts_event")


def features_by_date(continuous: pl.DataFrame, cfg=None, step_days: int | None = None) -> pl.DataFrame:
    """``build_features`` through the trade-date partitioned path: ``continuous`` stored one
    partition per trade date (plus its fronts) on a fresh in-memory warehouse, features built
    ``step_days`` dates per run as dates arrive (None: all dates in one run), read back whole."""
    import uuid

    from upath import UPath

    from foxhunt_pipeline.features import by_date
    from foxhunt_pipeline.instruments.rolls import trade_date
    from foxhunt_pipeline.storage import continuous_dates, object_store, trade_dates

    root = UPath(f"memory://features-by-date-{uuid.uuid4().hex}")
    dated = continuous.with_columns(day=trade_date(pl.col("ts_event")))
    fronts = dated.select("root", "day", "symbol", "contract_seq", "expiry").unique().sort("root", "day")
    days = fronts["day"].unique().sort().to_list()
    step = step_days or len(days)
    for i in range(0, len(days), step):
        new = days[i:i + step]
        for d in new:
            trade_dates.write_part(root, continuous_dates.TABLE, d,
                                   dated.filter(pl.col("day") == d).drop("day"))
        object_store.write_parquet(fronts.filter(pl.col("day") <= new[-1]),
                                   continuous_dates.state_path(root, "fronts"))
        # the date before the new ones gets its last targets from them
        by_date.build_dates(root, days[max(i - 1, 0)], new[-1], cfg)
    out = trade_dates.read_dates(root, by_date.TABLE)
    root.fs.rm(root.path, recursive=True)
    return out.sort("root", "ts_event") if out is not None else pl.DataFrame()


def write_by_date(warehouse, table: str, frame: pl.DataFrame) -> None:
    """``frame`` stored as ``table`` the way the assets store it: one folder per trade date."""
    from upath import UPath

    from foxhunt_pipeline.instruments.rolls import trade_date
    from foxhunt_pipeline.storage import trade_dates

    dated = frame.with_columns(_day=trade_date(pl.col("ts_event")))
    for (day,), part in dated.partition_by("_day", as_dict=True, maintain_order=True).items():
        trade_dates.write_part(UPath(warehouse), table, day, part.drop("_day"))
