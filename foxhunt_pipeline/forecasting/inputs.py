"""The features one trade date's forecasts read: the date's rows and, before them, only the
last ``lookback - 1`` rows of each root's segment from the stored dates just before it (the
history window of the date's first bars), never the whole history, and never a row after
the date.

Why the bound: a forecast for one new day must take seconds; scoring the history to get its
last day took minutes (``foxhunt predict`` over 20 days: about 2 minutes on 2 cores).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import polars as pl
from upath import UPath

from foxhunt_pipeline.forecasting.freshness import FEATURES, ForecastRefused
from foxhunt_pipeline.instruments.sessions import missing_sessions
from foxhunt_pipeline.storage import continuous_dates, trade_dates

#: stored dates read back at most for a root's warm-up (a segment's bars of a short session)
MAX_WARMUP_DATES = 5


@dataclass(frozen=True)
class DateInputs:
    """The features rows a date's forecasts read, sorted by (root, ts_event): the warm-up
    rows of earlier dates first, then the date's own (``is_day``)."""

    day: date
    frame: pl.DataFrame
    warmup_dates: tuple[date, ...]

    @property
    def day_rows(self) -> pl.DataFrame:
        return self.frame.filter(pl.col("is_day"))


def _read(root: UPath, day: date, columns: list[str] | None) -> pl.DataFrame:
    frame = trade_dates.read_dates(root, FEATURES, day, day, columns=columns)
    if frame is None or frame.is_empty():
        raise ForecastRefused(f"trade date {day}: no features rows")
    return frame


def read_date_inputs(root: UPath, day: date, lookback: int,
                     columns: list[str] | None = None) -> DateInputs:
    """``day``'s features (``columns`` of them, keys always) and each root's warm-up: the
    rows of its segment on the stored dates just before ``day``, when no session is missing
    in between (a window never spans a hole), at most ``lookback - 1`` of them."""
    keys = ["ts_event", "root", "contract_seq"]
    cols = None if columns is None else list(dict.fromkeys([*keys, *columns]))
    today = _read(root, day, cols).sort("root", "ts_event")
    need = max(int(lookback) - 1, 0)
    earlier = [d for d in trade_dates.stored_dates(root, FEATURES) if d < day]
    stale = set(continuous_dates.stale_dates(root))
    first_seq = dict(today.group_by("root").agg(pl.col("contract_seq").first()).iter_rows())
    parts: list[pl.DataFrame] = []
    used: list[date] = []
    have = dict.fromkeys(first_seq, 0)
    after = day
    for d in reversed(earlier[-MAX_WARMUP_DATES:]):
        wanting = [r for r, n in have.items() if n < need and missing_sessions(r, d, after) == 0]
        if not wanting:
            break
        if d in stale:
            raise ForecastRefused(f"trade date {day}: the date before it, {d}, is stale (late "
                                  "data moved its front contract); rebuild it with `foxhunt "
                                  f"materialize continuous_bars features --from {d} --to {day}`")
        rows = _read(root, d, cols).filter(pl.col("root").is_in(wanting)).sort("root", "ts_event")
        for r in wanting:
            seg = rows.filter((pl.col("root") == r) & (pl.col("contract_seq") == first_seq[r]))
            take = seg.tail(need - have[r])
            if take.height:
                parts.append(take)
                have[r] += take.height
            if seg.height < rows.filter(pl.col("root") == r).height:  # a roll: no further back
                have[r] = need
        used.append(d)
        after = d
    warm = [p.with_columns(is_day=pl.lit(False)) for p in parts]
    frame = pl.concat([*warm, today.with_columns(is_day=pl.lit(True))], how="diagonal_relaxed")
    return DateInputs(day, frame.sort("root", "ts_event"), tuple(sorted(used)))


__all__ = ["MAX_WARMUP_DATES", "DateInputs", "read_date_inputs"]
