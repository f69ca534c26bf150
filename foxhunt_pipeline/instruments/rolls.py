"""One front-month series per root, rolled by volume, from all raw_bars partitions.

Roll rule (``rule="volume"`` in the rolls table): the front contract changes at the
start of the first CME session day after a session day on which a later-expiring
contract traded more volume than the current front; the new front is the one with
the most volume that day. The series never rolls back to an earlier expiry. A
contract past its expiry is never front: if the front expires before volume has
moved, the series rolls on the day after expiry (``rule="expiry"``) to the
later-expiring contract with most volume on the last day, else the nearest one.
The first front of a root is the nearest-expiring contract trading on its first
session day, so no decision ever uses volume from the day it applies to.

Session day = CME trade date: the America/Chicago date, with bars from 17:00 CT on
belonging to the next day (the Sunday 17:00 open is Monday's session).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

import polars as pl

from foxhunt_pipeline.instruments.specs import expiry_date, parse_outright

EXCHANGE_TZ = "America/Chicago"
SESSION_ROLL_HOUR = 17  # CT: the trade date changes at the evening open
KEY = ["instrument_id", "ts_event", "publisher_id"]
BAR_COLUMNS = [
    "ts_event",
    "rtype",
    "publisher_id",
    "instrument_id",
    "symbol",
    "root",
    "open",
    "high",
    "low",
    "close",
    "volume",
]
ROLLS_SCHEMA = {
    "root": pl.String,
    "roll_date": pl.Date,
    "from_symbol": pl.String,
    "to_symbol": pl.String,
    "rule": pl.String,
}


def trade_date(ts: pl.Expr) -> pl.Expr:
    """CME trade date of a UTC timestamp expression."""
    local = ts.dt.convert_time_zone(EXCHANGE_TZ).dt.replace_time_zone(None)
    return (local + pl.duration(hours=24 - SESSION_ROLL_HOUR)).dt.date()


def trade_date_bounds(first: date, last: date | None = None) -> tuple[datetime, datetime]:
    """A UTC interval [lo, hi) holding every bar of trade dates ``first`` .. ``last`` (a date
    opens at 17:00 CT the evening before, 22:00 or 23:00 UTC), a little wider, so a scan can
    skip other files and row groups by their ``ts_event`` statistics."""
    base = datetime.combine(first, time(), tzinfo=UTC)
    end = datetime.combine(last or first, time(), tzinfo=UTC)
    return base - timedelta(hours=8), end + timedelta(hours=24)


def contract_expiry(root: str, symbol: str, ref: date) -> date:
    """Expiry of an outright; ``ref`` (a date it traded) resolves the one-digit year."""
    parsed = parse_outright(symbol, ref)
    if parsed is None:
        raise ValueError(f"{symbol!r} is not an outright contract symbol (root {root})")
    sym_root, year, month = parsed
    return expiry_date(sym_root, year, month)


@dataclass(frozen=True)
class _Front:
    symbol: str
    expiry: date
    seq: int


VALUE_COLUMNS = ["open", "high", "low", "close", "volume"]


def dedupe_bars(raw: pl.LazyFrame) -> pl.LazyFrame:
    """One row per (instrument_id, ts_event, publisher_id), whichever file it came from.

    Rule for duplicates: the row of the landed file whose name sorts first is kept
    (the same bar landed twice is one row; see :func:`duplicate_conflicts` for copies
    that disagree)."""
    return _sorted(raw).unique(subset=KEY, keep="first", maintain_order=True)


def _sorted(raw: pl.LazyFrame) -> pl.LazyFrame:
    cols = raw.collect_schema().names()
    return raw.sort([*KEY, "source_file"] if "source_file" in cols else KEY)


@dataclass(frozen=True)
class DuplicateConflicts:
    """Bars landed more than once with different values: how many dropped copies
    disagree with the kept one, and the first of them (kept file vs dropped file)."""

    count: int
    first: pl.DataFrame

    @property
    def message(self) -> str:
        if not self.count:
            return ""
        keys = ", ".join(
            f"{r['symbol']} {r['ts_event']} (publisher {r['publisher_id']})"
            for r in self.first.head(5).iter_rows(named=True)
        )
        files = ""
        if {"kept_file", "source_file"} <= set(self.first.columns):
            pairs = dict.fromkeys(f"{k} over {d}" for k, d in self.first.select("kept_file", "source_file").iter_rows())
            files = f" ({'; '.join(list(pairs)[:3])})"
        return (
            f"{self.count} duplicate bars disagree with the copy kept (same instrument, "
            f"ts_event and publisher, other prices or volume); kept the row of the file "
            f"whose name sorts first{files}; first keys: {keys}"
        )


def duplicate_conflicts(raw: pl.LazyFrame, first: int = 20) -> DuplicateConflicts:
    """Copies of a key whose OHLCV differ from the copy :func:`dedupe_bars` keeps."""
    ordered = _sorted(raw)
    cols = ordered.collect_schema().names()
    new_key = ~pl.all_horizontal([pl.col(c) == pl.col(c).shift(1) for c in KEY]).fill_null(False)
    kept = [pl.when(new_key).then(pl.col(c)).forward_fill().alias(f"kept_{c}") for c in VALUE_COLUMNS]
    if "source_file" in cols:
        kept.append(pl.when(new_key).then(pl.col("source_file")).forward_fill().alias("kept_file"))
    differs = pl.any_horizontal(
        [pl.col(c).ne_missing(pl.col(f"kept_{c}")) for c in VALUE_COLUMNS]
    )
    bad = ordered.with_columns(new_key.alias("_new"), *kept).filter(~pl.col("_new") & differs)
    count = int(bad.select(pl.len()).collect().item())
    shown = [*KEY, "symbol", *VALUE_COLUMNS, *(["kept_file", "source_file"] if "source_file" in cols else [])]
    return DuplicateConflicts(count, bad.select(shown).head(first).collect() if count else pl.DataFrame())


def _pick(cands: dict[str, int], expiry: dict[str, date]) -> str:
    """Most volume; ties go to the nearer expiry."""
    return max(cands, key=lambda s: (cands[s], -expiry[s].toordinal()))


def _fronts_for_root(root: str, daily: pl.DataFrame) -> tuple[list[tuple], list[tuple]]:
    """(front per day rows, roll rows) for one root; ``daily`` has symbol, day, volume."""
    first_seen: dict[str, date] = {}
    for sym, day in daily.select("symbol", "day").sort("day").iter_rows():
        first_seen.setdefault(sym, day)
    expiry = {s: contract_expiry(root, s, d) for s, d in first_seen.items()}
    vols: dict[date, dict[str, int]] = {}
    for sym, day, vol in daily.select("symbol", "day", "volume").iter_rows():
        vols.setdefault(day, {})[sym] = int(vol)

    front: _Front | None = None
    next_seq = 0
    pending: str | None = None  # decided on the previous session day
    prev_vols: dict[str, int] = {}
    out_days: list[tuple] = []
    rolls: list[tuple] = []
    for day in sorted(vols):
        today = vols[day]
        live = [s for s in today if expiry[s] >= day]
        target, rule = (pending, "volume") if pending and expiry[pending] >= day else (None, "")
        if front is not None and target is None and front.expiry < day:
            later = [s for s in live if expiry[s] > front.expiry]
            target = _pick({s: prev_vols.get(s, 0) for s in later}, expiry) if later else None
            rule = "expiry"
            if target is None:
                front = None  # nothing later trades yet: a gap, not a roll back
        if front is None and live:
            nearest = min(live, key=lambda s: expiry[s])
            front = _Front(nearest, expiry[nearest], next_seq)
            next_seq += 1
        elif front is not None and target is not None and target != front.symbol:
            rolls.append((root, day, front.symbol, target, rule))
            front = _Front(target, expiry[target], next_seq)
            next_seq += 1
        pending = None
        prev_vols = today
        if front is None:
            continue
        out_days.append((root, day, front.symbol, front.seq, front.expiry))
        front_vol = today.get(front.symbol, 0)
        busier = {s: v for s, v in today.items() if expiry[s] > front.expiry and v > front_vol}
        if busier:
            pending = _pick(busier, expiry)
    return out_days, rolls


FRONTS_SCHEMA = {
    "root": pl.String,
    "day": pl.Date,
    "symbol": pl.String,
    "contract_seq": pl.Int32,
    "expiry": pl.Date,
}


def dated_bars(raw: pl.LazyFrame) -> pl.LazyFrame:
    """De-duplicated bars with their trade date (``day``)."""
    return dedupe_bars(raw).select(BAR_COLUMNS).with_columns(trade_date(pl.col("ts_event")).alias("day"))


def daily_volume(bars: pl.DataFrame) -> pl.DataFrame:
    """Volume per (root, symbol, trade date) of de-duplicated bars: all a roll decision reads.
    Bars with volume 0 are left out (an OHLCV bar exists only where something traded: such
    a bar is no sign that a contract trades, so a contract with nothing else is no front)."""
    return (
        bars.filter(pl.col("volume") > 0)
        .group_by("root", "symbol", "day")
        # Int128: a u64 sum wraps silently (a broken bar near 2**64 would make the front
        # look idle and move the roll)
        .agg(pl.col("volume").cast(pl.Int128).sum())
        .sort("root", "day", "symbol")
    )


def fronts_from_daily(daily: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(front per root and trade date, rolls) from ``daily_volume`` rows. The front of a
    date depends only on earlier dates, so the rows of any prefix of the dates are the same
    whatever follows them."""
    day_rows: list[tuple] = []
    roll_rows: list[tuple] = []
    for (root,), part in daily.sort("root", "day", "symbol").partition_by(
        "root", as_dict=True, maintain_order=True
    ).items():
        d, r = _fronts_for_root(root, part)
        day_rows += d
        roll_rows += r
    fronts = pl.DataFrame(day_rows, schema=FRONTS_SCHEMA, orient="row")
    return fronts, pl.DataFrame(roll_rows, schema=ROLLS_SCHEMA, orient="row")


def join_fronts(bars: pl.DataFrame, fronts: pl.DataFrame, keep: tuple[str, ...] = ()) -> pl.DataFrame:
    """The front contract's bars (``dated_bars`` rows of any set of dates) -> continuous rows
    (and the columns ``keep`` of ``bars`` or ``fronts`` after them, e.g. ``day``)."""
    return (
        bars.join(fronts, on=["root", "day", "symbol"], how="inner")
        .select(*BAR_COLUMNS, "contract_seq", "expiry", *keep)
        .sort("root", "ts_event", "publisher_id")
    )


def build_continuous(raw: pl.LazyFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(continuous_bars, rolls) from all raw_bars; see the module docstring for the rule."""
    bars_df = dated_bars(raw).collect()
    fronts, rolls = fronts_from_daily(daily_volume(bars_df))
    return join_fronts(bars_df, fronts), rolls


def days_to_expiry(expiry: pl.Expr, ts: pl.Expr) -> pl.Expr:
    """Calendar days from a bar's trade date to its contract's expiry (for features)."""
    return (expiry - trade_date(ts)).dt.total_days()


__all__ = [
    "FRONTS_SCHEMA",
    "ROLLS_SCHEMA",
    "DuplicateConflicts",
    "build_continuous",
    "daily_volume",
    "dated_bars",
    "fronts_from_daily",
    "join_fronts",
    "contract_expiry",
    "days_to_expiry",
    "dedupe_bars",
    "duplicate_conflicts",
    "trade_date",
    "trade_date_bounds",
]
