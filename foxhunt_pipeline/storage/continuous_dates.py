"""continuous_bars by trade date: rebuild some dates while reading only their raw files.

Three small pieces of state under ``<warehouse>/_state/`` make that possible (each a
cache: deleting it costs one rescan, never a wrong answer):

* ``raw_trade_dates.parquet``: which trade dates each raw_bars file holds, keyed by the
  file's size and modification stamp, so a re-ingested file is re-read and no other;
* ``daily_volume.parquet``: volume per (root, symbol, trade date) of the de-duplicated
  bars of that date, keyed by the set of files holding the date: all a roll decision reads;
* ``fronts.parquet``: the front contract of every root and date (rolls.fronts_from_daily
  over every date's volume), which the features of a date use to find its segment's start.

Building dates D1..Dn reads each date's raw files (a landed UTC day touches two trade
dates), joins them with the fronts and writes ``continuous_bars/trade_date=D/``; a chunk of
dates (``CHUNK_DATES``) is read, de-duplicated, joined and checked at once, each date
exactly as it would be alone. The front
of a date depends only on earlier dates' volumes, so a date built alone equals the same
date of a full rebuild.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import date

import polars as pl
from upath import UPath

from foxhunt_pipeline.contracts import plausibility
from foxhunt_pipeline.contracts.tables import RAW_BARS_POLARS_SCHEMA
from foxhunt_pipeline.instruments import front_volume, rolls
from foxhunt_pipeline.storage import object_store, trade_dates

TABLE = "continuous_bars"
STATE = "_state"
INDEX_SCHEMA = {"source": pl.String, "stamp": pl.String, "trade_date": pl.Date}
# Decimal(38, 0) holds rolls.daily_volume's Int128 sums exactly, and every parquet writer
# (pyarrow for object stores) knows it
VOLUME_SCHEMA = {"trade_date": pl.Date, "root": pl.String, "symbol": pl.String,
                 "volume": pl.Decimal(38, 0), "files": pl.String}


def state_path(root: UPath, name: str) -> UPath:
    return root / STATE / f"{name}.parquet"


def _read_state(root: UPath, name: str, schema: dict) -> pl.DataFrame:
    p = state_path(root, name)
    return object_store.read_parquet(p) if p.is_file() else pl.DataFrame(schema=schema)


def _stamp(p: UPath) -> str:
    info = p.fs.info(p.path)
    when = info.get("mtime") or info.get("LastModified") or info.get("ETag") or info.get("created")
    return f"{info.get('size')}:{when}"


def raw_date_index(root: UPath) -> pl.DataFrame:
    """(source, stamp, trade_date) for every live raw_bars file; re-reads only new or
    re-ingested files (their ``ts_event`` column) and keeps the index file current."""
    files = {str(p): p for p in object_store.raw_bars_files(root)}
    stamps = {s: _stamp(p) for s, p in files.items()}
    old = _read_state(root, "raw_trade_dates", INDEX_SCHEMA)
    current = pl.DataFrame({"source": list(stamps), "stamp": list(stamps.values())},
                           schema={"source": pl.String, "stamp": pl.String})
    kept = old.join(current, on=["source", "stamp"], how="semi")
    known = set(kept["source"].unique().to_list())
    fresh = []
    for s in sorted(set(files) - known):
        ts = object_store.read_parquet(files[s], columns=["ts_event"])
        days = ts.select(rolls.trade_date(pl.col("ts_event")).unique().sort().alias("trade_date"))
        fresh.append(days.with_columns(source=pl.lit(s), stamp=pl.lit(stamps[s])))
    index = pl.concat([kept, *(f.select(list(INDEX_SCHEMA)) for f in fresh)], how="vertical")
    index = index.sort("trade_date", "source")
    if fresh or kept.height != old.height:
        object_store.write_parquet(index, state_path(root, "raw_trade_dates"))
    return index


def _files_of(index: pl.DataFrame, day: date) -> pl.DataFrame:
    return index.filter(pl.col("trade_date") == day)


#: in every date's key of the volume cache: a change of what a date's volume counts (v2: bars
#: with volume 0 left out) recomputes the cached dates
VOLUME_RULE = "v2"


def _files_key(rows: pl.DataFrame) -> str:
    text = VOLUME_RULE + "\n" + "\n".join(f"{s}|{k}" for s, k in sorted(rows.select("source", "stamp").iter_rows()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _dates_raw(root: UPath, sources: list[str], first: date, last: date) -> pl.LazyFrame:
    """The raw rows (duplicates included) of the files holding trade dates ``first`` ..
    ``last``, cut to their bounds, in the order of ``sources``."""
    lo, hi = rolls.trade_date_bounds(first, last)
    if object_store.is_local(root):
        raw = pl.scan_parquet([UPath(s).path for s in sources], hive_partitioning=False)
    else:
        raw = pl.concat([object_store.read_parquet(UPath(s)).lazy() for s in sources])
    return raw.filter(pl.col("ts_event").is_between(lo, hi, closed="left"))


def _day_raw(root: UPath, sources: list[str], day: date) -> pl.LazyFrame:
    """The raw rows (duplicates included) of the files holding ``day``, cut to its bounds."""
    return _dates_raw(root, sources, day, day)


#: trade dates read together by a build: one read of their files and one polars pass over
#: their rows instead of one per date (a date's rows are a few thousand: per-call overhead
#: was most of the cost); the memory of a chunk does not grow with the history
CHUNK_DATES = 16


def chunks(days: list[date], size: int | None = None) -> list[list[date]]:
    """``days`` (sorted) cut into runs of at most ``size`` (``CHUNK_DATES``) dates."""
    size = size or CHUNK_DATES
    return [days[i:i + size] for i in range(0, len(days), size)]


def dates_raw(root: UPath, index: pl.DataFrame, days: list[date], columns: list[str] | None = None
              ) -> pl.DataFrame:
    """The raw rows (duplicates included; ``columns`` of them, all by default) of the trade
    dates ``days`` (sorted, each held by a file of ``index``) with their trade date ``day``,
    from one read of the files holding them. A date's rows come in the order a read of that
    date alone gives (files in name order, rows in file order)."""
    sources = sorted(set(index.filter(pl.col("trade_date").is_in(days))["source"].to_list()))
    raw = _dates_raw(root, sources, days[0], days[-1])
    if columns is not None:
        raw = raw.select(columns)
    return raw.with_columns(rolls.trade_date(pl.col("ts_event")).alias("day")).filter(
        pl.col("day").is_in(days)).collect()


def day_bars(root: UPath, index: pl.DataFrame, day: date) -> pl.DataFrame:
    """De-duplicated bars of one trade date (with ``day``), read from the files holding it."""
    sources = _files_of(index, day)["source"].to_list()
    if not sources:
        return pl.DataFrame(schema={**{c: RAW_BARS_POLARS_SCHEMA[c] for c in rolls.BAR_COLUMNS},
                                    "day": pl.Date})
    return rolls.dated_bars(_day_raw(root, sources, day)).filter(pl.col("day") == day).collect()


def day_conflicts(root: UPath, index: pl.DataFrame, day: date) -> rolls.DuplicateConflicts:
    """Copies of one date's bars that disagree with the copy kept (rolls.duplicate_conflicts)."""
    sources = _files_of(index, day)["source"].to_list()
    if not sources:
        return rolls.DuplicateConflicts(0, pl.DataFrame())
    raw = _day_raw(root, sources, day).filter(rolls.trade_date(pl.col("ts_event")) == day)
    return rolls.duplicate_conflicts(raw)


def day_bars_and_conflicts(root: UPath, index: pl.DataFrame, day: date
                           ) -> tuple[pl.DataFrame, rolls.DuplicateConflicts]:
    """``day_bars`` and ``day_conflicts`` of one date from one read of its files; when no
    key repeats among its raw rows there is nothing to compare (the common case)."""
    sources = _files_of(index, day)["source"].to_list()
    if not sources:
        return day_bars(root, index, day), rolls.DuplicateConflicts(0, pl.DataFrame())
    raw = _day_raw(root, sources, day).collect()
    bars = rolls.dated_bars(raw.lazy()).filter(pl.col("day") == day).collect()
    if not raw.select(rolls.KEY).is_duplicated().any():
        return bars, rolls.DuplicateConflicts(0, pl.DataFrame())
    return bars, rolls.duplicate_conflicts(raw.lazy().filter(rolls.trade_date(pl.col("ts_event")) == day))


def day_volume(root: UPath, index: pl.DataFrame, day: date) -> pl.DataFrame:
    """``rolls.daily_volume`` of one date's bars. Its raw rows are its bars when no key
    repeats among them (the common case): their volumes are summed without the sort of
    the de-duplication, reading only the columns the sum needs."""
    sources = _files_of(index, day)["source"].to_list()
    if sources:
        raw = (_day_raw(root, sources, day).filter(rolls.trade_date(pl.col("ts_event")) == day)
               .select(*rolls.KEY, "root", "symbol", "volume").collect())
        if not raw.select(rolls.KEY).is_duplicated().any():
            return rolls.daily_volume(raw.select("root", "symbol", "volume", day=pl.lit(day, pl.Date)))
    return rolls.daily_volume(day_bars(root, index, day))


def may_repeat(raw: pl.DataFrame) -> bool:
    """Whether a key (``rolls.KEY``) may repeat among ``raw``'s rows, from the hashes of the
    keys: equal keys hash equal, so False is certain; a collision only sends the rows down
    the de-duplicating path."""
    return raw.select(pl.struct(rolls.KEY).hash().n_unique()).item() < raw.height


def chunk_volumes(root: UPath, index: pl.DataFrame, days: list[date]) -> list[pl.DataFrame]:
    """``day_volume`` of ``days`` (sorted, held by files of ``index``), one read per chunk of
    dates: where no key repeats among a chunk's raw rows (the common case) they are its bars;
    a chunk where one does is summed date by date, de-duplicated."""
    out = []
    for chunk in chunks(days):
        raw = dates_raw(root, index, chunk, [*rolls.KEY, "root", "symbol", "volume"])
        if may_repeat(raw):
            out += [day_volume(root, index, day) for day in chunk]
        else:
            out.append(rolls.daily_volume(raw.select("root", "symbol", "volume", "day")))
    return out


def daily_volumes(root: UPath, index: pl.DataFrame) -> pl.DataFrame:
    """Volume per (root, symbol, trade date) for every date with raw data; recomputes only
    the dates whose set of files changed and keeps the cache file current."""
    keys = {d: _files_key(g) for (d,), g in index.group_by("trade_date")}
    old = _read_state(root, "daily_volume", VOLUME_SCHEMA)
    valid = old.filter(
        pl.col("files") == pl.col("trade_date").replace_strict(keys, default=None, return_dtype=pl.String)
    )
    done = set(valid["trade_date"].unique().to_list())
    fresh = [vol.rename({"day": "trade_date"}).with_columns(
        files=pl.col("trade_date").replace_strict(keys, return_dtype=pl.String))
        for vol in chunk_volumes(root, index, sorted(set(keys) - done))]
    out = pl.concat(
        [valid, *(f.select(list(VOLUME_SCHEMA)).cast(VOLUME_SCHEMA) for f in fresh)], how="vertical"
    ).sort("trade_date", "root", "symbol")
    if fresh or valid.height != old.height:
        object_store.write_parquet(out, state_path(root, "daily_volume"))
    return out


def read_fronts(root: UPath) -> pl.DataFrame:
    return _read_state(root, "fronts", rolls.FRONTS_SCHEMA)


@dataclass
class ContinuousBuild:
    """What a build of some dates did: rows per date, the roll table, the dates outside
    the build whose front changed (late data moved a roll: rebuild them too), the roots
    held back on a date by a likely bad print (the date's other roots are stored), and the
    warnings a person should read, each with the trade date it is about."""

    rows: dict[date, int] = field(default_factory=dict)
    rolls: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=rolls.ROLLS_SCHEMA))
    stale: list[date] = field(default_factory=list)
    unknown: list[date] = field(default_factory=list)
    conflicts: int = 0  # duplicate bars that disagree with the copy kept
    first_conflicts: pl.DataFrame = field(default_factory=pl.DataFrame)
    jumps: int = 0  # bars flagged by plausibility.price_jumps (likely bad prints)
    first_jumps: pl.DataFrame = field(default_factory=pl.DataFrame)
    day_conflicts: dict[date, int] = field(default_factory=dict)  # conflicting duplicates per date
    blocked: dict[date, str] = field(default_factory=dict)  # date -> why roots of it were held back
    held: dict[date, list[str]] = field(default_factory=dict)  # date -> the roots held back
    notes: list[tuple[date, str]] = field(default_factory=list)  # (trade date, warning)

    def add_conflicts(self, found: rolls.DuplicateConflicts, keep: int = 20) -> None:
        self.conflicts += found.count
        if found.count and self.first_conflicts.height < keep:
            self.first_conflicts = pl.concat([self.first_conflicts, found.first], how="diagonal_relaxed").head(keep)

    def add_jumps(self, found: pl.DataFrame, keep: int = 20) -> None:
        self.jumps += found.height
        if found.height and self.first_jumps.height < keep:
            self.first_jumps = pl.concat([self.first_jumps, found], how="diagonal_relaxed").head(keep)

    def note_conflicts(self, day: date, found: rolls.DuplicateConflicts) -> None:
        self.add_conflicts(found)
        if found.count:
            self.day_conflicts[day] = found.count
            self.notes.append((day, f"continuous_bars {day}: {found.message}"))

    def hold_back(self, day: date, roots: list[str], jumps: pl.DataFrame, why: str) -> None:
        """``roots`` of ``day`` are not stored: ``jumps`` flagged them (``why``)."""
        self.add_jumps(jumps)
        self.blocked[day] = why
        self.held[day] = roots
        self.notes.append((day, why))

    @property
    def held_back(self) -> str:
        """The held-back (root, date) pairs in one line: ``CL 2024-01-15, ES 2024-01-16``."""
        return ", ".join(f"{r} {d}" for d, roots in self.held.items() for r in roots)

    @property
    def conflicts_message(self) -> str:
        return rolls.DuplicateConflicts(self.conflicts, self.first_conflicts).message

    def warnings_of(self, first: date, last: date) -> list[str]:
        """The warnings about trade dates in [first, last]."""
        return [text for day, text in self.notes if first <= day <= last]


def day_jumps(frame: pl.DataFrame, previous: pl.DataFrame | None, day: date, multiple: float,
              window: int) -> pl.DataFrame:
    """The bars of ``frame`` (date ``day``) that ``plausibility.price_jumps`` flags, warmed up
    on ``previous``."""
    if multiple <= 0:
        return frame.head(0)
    warm = frame if previous is None else pl.concat([previous, frame], how="vertical_relaxed")
    return plausibility.price_jumps(warm, multiple, window).filter(rolls.trade_date(pl.col("ts_event")) == day)


def without_roots(root: UPath, day: date, frame: pl.DataFrame, roots: list[str]) -> pl.DataFrame:
    """``frame`` (the rows of ``day``) without ``roots``' rows, which keep their stored
    version of the date (none when the date was never stored): one root's bad print holds
    back that root only."""
    kept = frame.filter(~pl.col("root").is_in(roots))
    old = trade_dates.read_dates(root, TABLE, day, day, where=pl.col("root").is_in(roots))
    if old is None or old.is_empty():
        return kept
    return pl.concat([kept, old.select(kept.columns)], how="vertical_relaxed").sort(
        "root", "ts_event", "publisher_id", maintain_order=True)


def _stored_before(root: UPath, day: date) -> pl.DataFrame | None:
    """The stored continuous rows of the last date before ``day`` (price-jump warm-up)."""
    before = [d for d in trade_dates.stored_dates(root, TABLE) if d < day]
    return trade_dates.read_dates(root, TABLE, before[-1], before[-1]) if before else None


def chunk_frames(root: UPath, index: pl.DataFrame, fronts: pl.DataFrame, days: list[date]
                 ) -> dict[date, tuple[pl.DataFrame, rolls.DuplicateConflicts]]:
    """(continuous rows, duplicate conflicts) of each of ``days`` (sorted, each held by a
    file of ``index``) from one read of their files and one de-duplication and join of their
    rows: each equals ``day_bars_and_conflicts`` + ``rolls.join_fronts`` of the date alone."""
    raw = dates_raw(root, index, days)
    # no key repeats (the common case): sorted by the key, the rows are already the bars
    deduped = rolls.dedupe_bars(raw.lazy()) if may_repeat(raw) else raw.lazy().sort(rolls.KEY)
    bars = deduped.select(*rolls.BAR_COLUMNS, "day").collect()
    joined = rolls.join_fronts(bars, fronts.filter(pl.col("day").is_in(days)),
                               keep=("day",))
    parts = joined.partition_by("day", as_dict=True, maintain_order=True)
    repeats = bars.height < raw.height
    out = {}
    for day in days:
        frame = parts[(day,)].drop("day") if (day,) in parts else joined.head(0).drop("day")
        found = (rolls.duplicate_conflicts(raw.lazy().filter(pl.col("day") == day).drop("day")) if repeats
                 else rolls.DuplicateConflicts(0, pl.DataFrame()))
        out[day] = frame, found
    return out


def dated_frames(root: UPath, index: pl.DataFrame, fronts: pl.DataFrame, days: list[date]
                 ) -> Iterator[list[tuple[date, pl.DataFrame, rolls.DuplicateConflicts]]]:
    """(date, continuous rows, duplicate conflicts) of each of ``days`` (sorted), in order, a
    chunk of dates at a time from one read of their files (``chunk_frames``); a date no file
    holds is empty."""
    have = set(index["trade_date"].to_list())
    for chunk in chunks(days):
        held = [d for d in chunk if d in have]
        built = chunk_frames(root, index, fronts, held) if held else {}
        for day in chunk:
            if day not in built:
                bars, found = day_bars_and_conflicts(root, index, day)
                built[day] = rolls.join_fronts(bars, fronts.filter(pl.col("day") == day)), found
        yield [(day, *built[day]) for day in chunk]


def chunk_jumps(frames: list[tuple[date, pl.DataFrame]], previous: pl.DataFrame | None,
                multiple: float, window: int) -> pl.DataFrame:
    """The bars ``plausibility.price_jumps`` flags in each of ``frames`` (date order) when the
    date is warmed up on the frame before it (the first on ``previous``), with the frame's
    position (``pair``): one call for all of them, each (date before, date) pair its own
    group, so every date sees the rows it sees alone. Of the date before, only the last
    ``window`` + 1 bars of each segment are kept: all a date's medians read of it (the
    oldest of them gives the next its previous close)."""
    tagged = [f.with_columns(pair=pl.lit(tag, pl.Int32)) for tag, (_, f) in enumerate(frames)]
    if previous is not None:
        tagged.insert(0, previous.with_columns(pair=pl.lit(-1, pl.Int32)))
    rows = pl.concat(tagged, how="vertical_relaxed")
    keys = ["root", "contract_seq", "pair"]
    tails = rows.filter(pl.col("pair") < len(frames) - 1,
                        pl.int_range(pl.len()).over(keys) >= pl.len().over(keys) - (window + 1))
    # a pair's rows: the tail of the date before, then the date (a group's order is its rows')
    warm = pl.concat([tails.with_columns(pl.col("pair") + 1), rows.filter(pl.col("pair") >= 0)])
    flagged = plausibility.price_jumps(warm, multiple, window, group=("root", "contract_seq", "pair"))
    own = pl.col("pair").replace_strict(list(range(len(frames))), [day for day, _ in frames],
                                        return_dtype=pl.Date)
    return flagged.filter(rolls.trade_date(pl.col("ts_event")) == own)


def quiet_dates(frames: list[tuple[date, pl.DataFrame]], previous: pl.DataFrame | None,
                multiple: float, window: int) -> set[date]:
    """The dates of ``frames`` in which no bar is flagged as ``build_dates`` checks a date
    (``chunk_jumps``); every date when ``multiple`` turns the check off."""
    if multiple <= 0:
        return {day for day, _ in frames}
    loud = set(chunk_jumps(frames, previous, multiple, window)["pair"].to_list())
    return {day for tag, (day, _) in enumerate(frames) if tag not in loud}


def _roll_state(root: UPath, index: pl.DataFrame, days: list[date]) -> tuple[pl.DataFrame, ContinuousBuild]:
    """(fronts of every date, a build holding the roll table, the stale dates and the thin
    fronts of ``days``); the fronts and stale-date state files are kept current."""
    volume = daily_volumes(root, index)
    daily = volume.rename({"trade_date": "day"}).select(
        "root", "symbol", "day", pl.col("volume").cast(pl.Int128))
    fronts, roll_table = rolls.fronts_from_daily(daily)
    old = read_fronts(root)
    build = ContinuousBuild(rolls=roll_table)
    if old.height:
        moved = pl.concat([old.join(fronts, on=list(fronts.columns), how="anti"),
                           fronts.join(old, on=list(fronts.columns), how="anti")])
        build.stale = sorted(set(moved["day"].to_list()) - set(days))
    _write_stale(root, (set(stale_dates(root)) | set(build.stale)) - set(days))
    object_store.write_parquet(fronts, state_path(root, "fronts"))
    if days:
        build.notes += front_volume.thin_fronts(daily, fronts, days[0], days[-1])
    return fronts, build


def build_dates(
    root: UPath,
    days: Iterable[date],
    validate: Callable[[pl.DataFrame], bool] | None = None,
    jump_multiple: float = plausibility.DEFAULT_JUMP_MULTIPLE,
    jump_window: int = plausibility.DEFAULT_JUMP_WINDOW,
) -> ContinuousBuild:
    """Rebuild continuous_bars for ``days``. ``validate(frame) -> bool`` may veto a date's
    write; a likely bad print (``contracts.plausibility``, ``jump_multiple``; 0 turns the
    check off) holds back its root on that date: the root's previous version of the date
    stays, and the date's other roots are stored. Duplicate conflicts,
    jumps and thin fronts of the built dates are reported; a date's jumps read the date
    before as warm-up. Dates outside ``days`` whose front moved are remembered
    (:func:`stale_dates`) until they are rebuilt."""
    days = sorted(set(days))
    index = raw_date_index(root)
    fronts, build = _roll_state(root, index, days)
    have = set(index["trade_date"].to_list())
    previous = _stored_before(root, days[0]) if days else None
    for chunk in dated_frames(root, index, fronts, days):  # one read per chunk of dates
        quiet = quiet_dates([(d, f) for d, f, _ in chunk], previous, jump_multiple, jump_window)
        for day, frame, found in chunk:
            if day not in have:
                build.unknown.append(day)
            build.note_conflicts(day, found)
            # a date warmed up on the chunk's date before it was checked with the chunk;
            # after a held-back date the next one warms up on an earlier date: checked alone
            jumps = frame.head(0) if day in quiet else day_jumps(frame, previous, day, jump_multiple, jump_window)
            if jumps.height:
                roots = sorted(set(jumps["root"].to_list()))
                build.hold_back(day, roots, jumps, jump_message(root, index, day, jumps, jump_multiple))
                frame = without_roots(root, day, frame, roots)
                quiet = set()  # the next date warms up on what is stored of this one: checked alone
            previous = frame
            if validate is not None and not validate(frame):
                continue
            if frame.height or trade_dates.date_dir(root, TABLE, day).is_dir():
                trade_dates.write_part(root, TABLE, day, frame)
            build.rows[day] = frame.height
    return build


def jump_message(root: UPath, index: pl.DataFrame, day: date, jumps: pl.DataFrame,
                 multiple: float) -> str:
    """One line naming the roots held back on a date and their first flagged bars: time,
    contract, prices, why, and the landed file(s) they came from."""
    sources = _files_of(index, day)["source"].to_list()
    raw = _day_raw(root, sources, day).join(
        jumps.lazy().select(rolls.KEY), on=rolls.KEY, how="semi").select(
        *rolls.KEY, "source_file").collect()
    files = {k: sorted(set(g["source_file"].to_list()))
             for k, g in raw.group_by(rolls.KEY)}
    bars = []
    for r in jumps.head(3).iter_rows(named=True):
        where = files.get((r["instrument_id"], r["ts_event"], r["publisher_id"]), [])
        typical = "-" if r["typical_range"] is None else f"{r['typical_range']:g}"
        bars.append(f"{r['root']} {r['symbol']} bar {r['ts_event'].isoformat()} (open {r['open']:g}, "
                    f"high {r['high']:g}, low {r['low']:g}, close {r['close']:g}; range {r['true_range']:g} "
                    f"vs typical {typical}: {r['reason']}) in {', '.join(where) or 'an unknown file'}")
    more = f" and {jumps.height - 3} more" if jumps.height > 3 else ""
    roots = sorted(set(jumps["root"].to_list()))
    return (f"continuous_bars {day}: {', '.join(roots)} not stored for this date, likely bad print(s) "
            f"(price_jump_multiple {multiple:g}): {'; '.join(bars)}{more}. The previous version of "
            f"{', '.join(roots)} on {day} stays and the date's other roots are stored; land a corrected "
            f"file, or raise price_jump_multiple in the run config if the move is real")


def stale_dates(root: UPath) -> list[date]:
    """Dates whose stored continuous_bars (and features) predate a move of their front by
    late data, until a build rebuilds them."""
    return sorted(_read_state(root, "stale_dates", {"day": pl.Date})["day"].to_list())


def _write_stale(root: UPath, days: set[date]) -> None:
    path = state_path(root, "stale_dates")
    if days or path.is_file():
        object_store.write_parquet(pl.DataFrame({"day": sorted(days)}, schema={"day": pl.Date}), path)


def touched_dates(root: UPath, sources: Iterable[str]) -> list[date]:
    """Trade dates held by the given raw_bars files (their partition keys' files)."""
    index = raw_date_index(root)
    wanted = {str(object_store.raw_bars_partition_upath(root, s)) for s in sources}
    return sorted(set(index.filter(pl.col("source").is_in(list(wanted)))["trade_date"].to_list()))


def rebuild_span(root: UPath, days: Iterable[date]) -> tuple[str, str] | None:
    """(first, last) trade-date partition key that rebuilds ``days``: from the stored date
    before the first of them (its last targets need the new date's first bars) to the last."""
    days = sorted(days)
    if not days:
        return None
    before = [d for d in trade_dates.stored_dates(root, TABLE) if d < days[0]]
    first = before[-1] if before else days[0]
    return trade_dates.partition_key_of(first), trade_dates.partition_key_of(days[-1])


#: dates further apart than this run in separate runs: a run covers no more than a few
#: empty weekday partitions (a holiday, a weekend), never the whole of a hole in the data
RUN_BREAK_DAYS = 7


def rebuild_spans(root: UPath, days: Iterable[date], break_days: int = RUN_BREAK_DAYS
                  ) -> list[tuple[str, str]]:
    """Partition-key ranges that rebuild ``days``, one per cluster of dates at most
    ``break_days`` apart (a six-year hole is two runs, not 1,600 empty partitions). A
    cluster starts at the stored date before its first date when that one is close enough
    to share its stretch (its last targets need the new date's first bars)."""
    days = sorted(set(days))
    stored = trade_dates.stored_dates(root, TABLE)
    spans: list[tuple[str, str]] = []
    cluster: list[date] = []
    for day in [*days, None]:
        if cluster and (day is None or (day - cluster[-1]).days > break_days):
            before = [d for d in stored if d < cluster[0]]
            first = before[-1] if before and (cluster[0] - before[-1]).days <= break_days else cluster[0]
            key = (trade_dates.partition_key_of(first), trade_dates.partition_key_of(cluster[-1]))
            if spans and key[0] <= spans[-1][1]:  # the date before joined the previous cluster
                key = (spans.pop()[0], key[1])
            spans.append(key)
            cluster = []
        if day is not None:
            cluster.append(day)
    return spans


def all_dates(root: UPath) -> list[date]:
    return sorted(set(raw_date_index(root)["trade_date"].to_list()))


__all__ = ["ContinuousBuild", "all_dates", "without_roots", "build_dates", "chunk_frames", "chunk_jumps", "chunk_volumes", "chunks",
           "daily_volumes", "dated_frames", "dates_raw", "day_jumps", "may_repeat", "quiet_dates", "day_bars", "day_bars_and_conflicts",
           "day_conflicts",
           "raw_date_index", "read_fronts", "rebuild_span", "rebuild_spans", "stale_dates", "touched_dates"]
