"""Plausibility checks: a value can pass the contract and still be odd.

A bad print (a 1000x price, a slipped decimal, one bar far off that the next bars do not
follow) must not reach the features, and a real move (news, the open after a weekend or an
outage) must. A bar is judged against fresh prices only:

* *far beyond any plausible move*: its high or low lies more than ``MAX_LOG_MOVE`` (25%)
  from the previous close of its contract, however old: CME's price limits halt a market
  long before that, and a 2x price, a slipped decimal or a 1000x print are far beyond it;
* *a jump the next bars do not confirm*: a bar that continues its session (the previous
  bar is of the same session, with no hole in between: ``instruments.sessions``) whose
  true range exceeds ``multiple`` x the median range of the ``window`` bars before it, or
  ``JUMP_DAILY_MOVES`` typical daily moves of its root (a busy session's median range is
  wide), is a jump; it is a bad print when the median close of the next ``CONFIRM_BARS``
  bars of its session gives back more than half of it (it reverts), or when no later bar
  of the session exists to confirm it. A jump that stays is news;
* *the first bar after a session open or a hole* has no fresh close to compare with: it is
  judged on its own range, a bad print beyond ``OPENING_DAILY_MOVES`` x the root's typical
  daily move (``daily_vol`` of ``instruments.ROOTS`` x its price: an opening bar carries
  what happened while the market was closed, a few daily moves at most), or when the next
  bars do not confirm its level (their median close lies beyond ``multiple`` x the recent
  range from its close).

The limits are those of the default ``multiple`` (200); another multiple scales all of them
alike, so raising it lets a real move through whichever rule caught it. continuous_bars
holds the flagged bar's root and trade date back (the previous version stays) and names the
bar and the landed file; a person decides (a corrected file, or a higher multiple where the
move was real).
"""

from __future__ import annotations

import polars as pl

from foxhunt_pipeline.instruments.rolls import trade_date
from foxhunt_pipeline.instruments.sessions import new_stretch
from foxhunt_pipeline.instruments.specs import ROOTS

# a bad print (a 2x or 1000x price, a slipped decimal) is thousands of typical ranges away;
# real news bars (a CPI release, the cash open after a quiet night) reach some 30-60x the
# overnight median range on minute bars, so 200 flags the first and spares the second
DEFAULT_JUMP_MULTIPLE = 200.0
DEFAULT_JUMP_WINDOW = 60
#: bars after a jump whose median close says whether it stays (news) or reverts (a bad print)
CONFIRM_BARS = 5
#: a jump is confirmed when the next bars keep at least this share of it
CONFIRM_SHARE = 0.5
#: no bar of a CME future moves this far (log) from its contract's previous close
MAX_LOG_MOVE = 0.25
#: an opening bar's own range beyond this many typical daily moves of its root is a bad print
OPENING_DAILY_MOVES = 10.0
#: a bar moving this many typical daily moves of its root in a minute is a jump however busy
#: the session (a CPI bar moves ES about two); it is a bad print if the next bars undo it
JUMP_DAILY_MOVES = 3.0

FLAGGED_COLUMNS = {"true_range": pl.Float64, "typical_range": pl.Float64, "reason": pl.String}


def price_jumps(
    frame: pl.DataFrame,
    multiple: float = DEFAULT_JUMP_MULTIPLE,
    window: int = DEFAULT_JUMP_WINDOW,
    group: tuple[str, ...] = ("root", "contract_seq"),
) -> pl.DataFrame:
    """The likely bad prints of ``frame`` (each ``group``'s rows in time order; a roll starts
    a new contract segment, never a jump), in frame order, with their ``true_range`` (own
    range for a bar that opens a session or follows a hole), the ``typical_range`` (median
    range of the ``window`` bars before it, floored at the root's tick) and the ``reason``.
    See the module docstring for the rules."""
    if frame.height == 0:
        return frame.head(0).with_columns(pl.lit(None, dt).alias(c) for c, dt in FLAGGED_COLUMNS.items())
    keys = list(group)
    ticks = {r: s.tick_size for r, s in ROOTS.items()}
    daily = {r: s.daily_vol for r, s in ROOTS.items()}
    day = trade_date(pl.col("ts_event"))
    opens = pl.Series("_open", new_stretch(frame, by=group)) | (day != day.shift(1).over(keys)).fill_null(True)
    prev = pl.col("close").shift(1).over(keys)
    hi, lo, close = pl.col("high"), pl.col("low"), pl.col("close")
    df = frame.with_columns(opens, _prev=prev).with_columns(
        _run=pl.col("_open").cum_sum().over(keys),
        true_range=pl.when(pl.col("_open")).then(hi - lo)
        .otherwise(pl.max_horizontal(hi, "_prev") - pl.min_horizontal(lo, "_prev")),
    )
    run = [*keys, "_run"]
    # the median close of the next CONFIRM_BARS bars of the run (a rolling median read backwards)
    later = close.shift(-1).over(run).reverse().rolling_median(CONFIRM_BARS, min_samples=1).reverse().over(run)
    df = df.with_columns(
        typical_range=pl.col("true_range").rolling_median(window_size=window, min_samples=max(2, min(window, 10)))
        .shift(1).over(keys),
        _later=later,
    ).with_columns(_floor=pl.max_horizontal(
        "typical_range", pl.col("root").replace_strict(ticks, default=0.0, return_dtype=pl.Float64)))
    # the fresh bar's jump: from the previous close to the farther of its high and low
    up = (hi - pl.col("_prev")) >= (pl.col("_prev") - lo)
    move = pl.when(up).then(hi - pl.col("_prev")).otherwise(lo - pl.col("_prev"))
    kept = (pl.col("_later") - pl.col("_prev")) / move
    scale = multiple / DEFAULT_JUMP_MULTIPLE
    day_move = pl.col("root").replace_strict(daily, default=None, return_dtype=pl.Float64) * close
    jump = ~pl.col("_open") & (
        (pl.col("typical_range").is_not_null() & (pl.col("true_range") > multiple * pl.col("_floor")))
        | (pl.col("true_range") > JUMP_DAILY_MOVES * scale * day_move).fill_null(False))
    reverts = jump & (pl.col("_later").is_null() | (kept < CONFIRM_SHARE))
    far = pl.max_horizontal((hi / pl.col("_prev")).log().abs(), (lo / pl.col("_prev")).log().abs()) > MAX_LOG_MOVE * scale
    wide_open = pl.col("_open") & (hi - lo > OPENING_DAILY_MOVES * scale * day_move).fill_null(False)
    unconfirmed_open = (pl.col("_open") & pl.col("typical_range").is_not_null()
                        & ((pl.col("_later") - close).abs() > multiple * pl.col("_floor")).fill_null(False))
    reason = (
        pl.when(far.fill_null(False)).then(pl.lit(f"more than {MAX_LOG_MOVE:.0%} from the previous close"))
        .when(reverts).then(pl.lit("a jump the next bars do not confirm"))
        .when(wide_open).then(pl.lit(f"an opening range beyond {OPENING_DAILY_MOVES:g} typical daily moves"))
        .when(unconfirmed_open).then(pl.lit("an opening level the next bars do not confirm"))
    )
    out = df.with_columns(reason=reason).filter(pl.col("reason").is_not_null())
    return out.drop("_open", "_prev", "_run", "_later", "_floor")
