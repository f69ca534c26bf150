"""Plausibility checks: a value can pass the contract and still be odd.

A price jump far beyond the recent range is usually a bad print (a 1000x price, a
missing decimal): continuous_bars holds its trade date back (the previous version stays)
and names the bar and the landed file; a person decides (a corrected file, or a higher
multiple where the move was real).
"""

from __future__ import annotations

import polars as pl

from foxhunt_pipeline.instruments.rolls import trade_date
from foxhunt_pipeline.instruments.specs import ROOTS

# a bad print (a 2x or 1000x price, a slipped decimal) is thousands of typical ranges away;
# real news bars (a CPI release, the cash open after a quiet night) reach some 30-60x the
# overnight median range on minute bars, so 200 flags the first and spares the second
DEFAULT_JUMP_MULTIPLE = 200.0
DEFAULT_JUMP_WINDOW = 60


def price_jumps(
    frame: pl.DataFrame,
    multiple: float = DEFAULT_JUMP_MULTIPLE,
    window: int = DEFAULT_JUMP_WINDOW,
    group: tuple[str, ...] = ("root", "contract_seq"),
) -> pl.DataFrame:
    """Bars whose true range (high/low against the previous close of the same session)
    exceeds ``multiple`` times the median true range of the ``window`` bars before it,
    within one contract segment (a roll is not a jump). The median is floored at the root's tick size, so a
    flat market does not flag every tick. Returns the flagged rows with their
    ``true_range`` and ``typical_range``, in frame order."""
    if frame.height == 0:
        return frame.head(0).with_columns(
            true_range=pl.lit(None, pl.Float64), typical_range=pl.lit(None, pl.Float64)
        )
    keys = list(group)
    # the previous close of the same session only: a session opens on news that came while
    # it was closed (a weekend, a hole in the data), so its first bar is judged on its own range
    prev_close = pl.col("close").shift(1).over(*keys, trade_date(pl.col("ts_event")))
    hi = pl.max_horizontal("high", prev_close)
    lo = pl.min_horizontal("low", prev_close)
    ticks = {r: s.tick_size for r, s in ROOTS.items()}
    tick = pl.col("root").replace_strict(ticks, default=0.0, return_dtype=pl.Float64)
    out = frame.with_columns((hi - lo).alias("true_range")).with_columns(
        pl.col("true_range")
        .rolling_median(window_size=window, min_samples=max(2, min(window, 10)))
        .shift(1)
        .over(keys)
        .alias("typical_range")
    )
    floor = pl.max_horizontal("typical_range", tick)
    return out.filter(
        pl.col("typical_range").is_not_null() & (pl.col("true_range") > multiple * floor)
    )
