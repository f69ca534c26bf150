"""Features of some trade dates, equal to the same dates of a full rebuild.

Every feature is computed within one (root, contract_seq) segment and looks only back,
except the targets, which look ``horizon`` bars ahead within the segment. So the features
of dates [start, end] of a root are those of its segment read from the segment's first
date (the warm-up, however long: EWMs have unbounded memory) up to the segment's next date
after ``end`` (the targets of ``end``'s last bars), cut back to [start, end]. The segment
starts come from the fronts table (``storage.continuous_dates``).

A date's rows of every root are one file, ``features/trade_date=D/data.parquet``: a
parquet file costs per column chunk, so one file of four roots writes about as fast as
one root's. Segments are computed in the order they end, each continuous_bars date is
read once per run, and a date is written (and dropped from memory) as soon as the
segments of all its roots are computed, by writer threads while the next segment is
computed; rows waiting beyond a fixed budget wait on disk
(``_DateBuffer``): memory is about the longest segment being computed, whatever the length
of the history.

Beside each date's file the writer keeps the date's summary for the training dataset
(``data.summary.npz``, ``dataset_dates.summarise_features`` of the rows it just wrote,
stamped with the file's ``source_stamp``), so the dataset step does not read every
features file back to summarise it.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter, deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import polars as pl
from upath import UPath

from foxhunt_pipeline.basics.atomic import temp_sibling
from foxhunt_pipeline.features.build import ShortStretch, check_continuous, root_features
from foxhunt_pipeline.features.dataset_dates import summarise_features
from foxhunt_pipeline.features.grid import trade_date_expr
from foxhunt_pipeline.features.library import FeatureConfig
from foxhunt_pipeline.instruments.rolls import trade_date
from foxhunt_pipeline.instruments.sessions import Hole, quiet_limit
from foxhunt_pipeline.instruments.specs import spec
from foxhunt_pipeline.storage import artifact_sync as sync
from foxhunt_pipeline.storage import continuous_dates, dataset_store, object_store, trade_dates

TABLE = "features"
PART = "data"  # the one file of a date (older warehouses hold one file per root)
# a derived table, rebuilt from continuous_bars on demand, so it trades bytes for time:
# lz4 writes a features date in about half zstd's CPU time (6.8 vs 13.2 ms for a date of
# ~280 columns) for files ~14% larger, and the full build in benchmarks/history_scaling.py
# gets faster by it; readers (polars, pyarrow, DuckDB) read both codecs, so a warehouse of
# older zstd dates reads as before
COMPRESSION = "lz4"


@dataclass(frozen=True)
class Span:
    """A segment to compute: its rows are read from ``first`` to ``last`` (the warm-up before
    the run's dates, the next date's first bars after them); ``days`` are its dates in the
    run."""

    root: str
    seq: int
    first: date
    last: date
    days: tuple[date, ...]


def segment_spans(fronts: pl.DataFrame, start: date, end: date) -> list[Span]:
    """Every segment that trades in [start, end], in the order they end in the run (so a
    date's roots are complete as early as possible)."""
    spans = []
    for (root, seq), g in fronts.group_by("root", "contract_seq"):
        days = g["day"].sort()
        inside = days.filter((days >= start) & (days <= end))
        if inside.is_empty():
            continue
        after = days.filter(days > end)
        # a segment that ends inside the run is read up to its own last date, not the run's:
        # no later date holds its rows, and reading them kept every date cached to the end
        spans.append(Span(root, int(seq), days.min(), after.min() if after.len() else days.max(),
                          tuple(inside.to_list())))
    return sorted(spans, key=lambda s: (s.days[-1], s.root, s.seq))


class ContinuousDates:
    """The continuous_bars dates a run's segments read, each read once and dropped when no
    segment left needs it."""

    def __init__(self, root: UPath, spans: list[Span]):
        self.parts = trade_dates.date_parts(root, continuous_dates.TABLE)
        self.need: Counter[date] = Counter(d for s in spans for d in self._dates(s))
        self.frames: dict[date, pl.DataFrame] = {}

    def _dates(self, span: Span) -> list[date]:
        return [d for d in self.parts if span.first <= d <= span.last]

    def segment(self, span: Span) -> pl.DataFrame | None:
        """The segment's bars from its first read date to its last, in time order."""
        frames = []
        for d in self._dates(span):
            if d not in self.frames:
                self.frames[d] = pl.concat(
                    [object_store.read_parquet(p) for p in self.parts[d]], how="vertical_relaxed")
            frames.append(self.frames[d].filter((pl.col("root") == span.root)
                                                & (pl.col("contract_seq") == span.seq)))
        return pl.concat(frames, how="vertical_relaxed") if frames else None

    def done(self, span: Span) -> None:
        for d in self._dates(span):
            self.need[d] -= 1
            if self.need[d] <= 0:
                self.frames.pop(d, None)


def feature_dates(root: UPath, start: date, end: date, cfg: FeatureConfig | None = None,
                  validate: Callable[[pl.DataFrame], bool] | None = None,
                  short: list[ShortStretch] | None = None, spans: list[Span] | None = None,
                  holes: list[Hole] | None = None,
                  ) -> Iterator[tuple[Span, pl.DataFrame | None, bool]]:
    """(segment, its features rows of the dates in [start, end] or None, passed), one
    segment at a time in the order they end. ``validate`` sees the whole stretch computed
    (from the segment's first date to the date after ``end``): the contract's rule that
    targets are null only at the end of the data holds there, not on a range cut out of a
    longer segment. Stretches of those dates too short for the warm-up are appended to
    ``short``, holes inside their sessions (an outage) to ``holes``. ``spans``: the run's
    segments (default: those of the fronts table)."""
    cfg = cfg or FeatureConfig()
    if spans is None:
        spans = segment_spans(continuous_dates.read_fronts(root), start, end)
    bars_of = ContinuousDates(root, spans)
    for span in spans:
        spec(span.root)  # unknown roots fail here, by name
        bars = bars_of.segment(span)
        bars_of.done(span)
        if bars is None or bars.is_empty():
            yield span, None, True
            continue
        found: list[ShortStretch] = []
        cut: list[Hole] = []
        out = root_features(check_continuous(bars), span.root, cfg, found, cut)
        del bars
        if short is not None:
            short += [s for s in found if s.last >= start and s.first <= end]
        if holes is not None:
            holes += [h for h in cut if start <= _trade_date(h.first_after) <= end]
        if out is None:
            yield span, None, True
            continue
        passed = validate is None or validate(out)
        out = out.filter(trade_date_expr().is_between(start, end))
        yield span, (out if out.height else None), passed


@dataclass
class FeatureBuild:
    """What a build of some dates wrote (rows per date) and the warnings a person should
    read, each with the trade date it is about."""

    rows: dict[date, int] = field(default_factory=dict)
    notes: list[tuple[date, str]] = field(default_factory=list)

    def warnings_of(self, first: date, last: date) -> list[str]:
        return [text for day, text in self.notes if first <= day <= last]


def short_notes(short: list[ShortStretch], warmup: int, start: date, end: date) -> list[tuple[date, str]]:
    """One warning per root whose stretches in [start, end] were too short to give features."""
    out = []
    for root in sorted({s.root for s in short}):
        mine = sorted((s for s in short if s.root == root), key=lambda s: s.first)
        lo, hi = max(mine[0].first, start), min(mine[-1].last, end)
        listed = "; ".join(f"{s.symbol} {s.first} .. {s.last}: {s.bars} bars" for s in mine[:4])
        more = f"; and {len(mine) - 4} more" if len(mine) > 4 else ""
        out.append((lo, f"features {lo} .. {hi}: {root} has no features on the dates of {len(mine)} "
                        f"contract stretch(es) shorter than the {warmup}-bar warm-up ({listed}{more}); "
                        f"land more of {root}'s sessions around them to get features there"))
    return out


def _trade_date(ts) -> date:
    return pl.select(trade_date(pl.lit(ts))).item()


def hole_notes(holes: list[Hole], shown: int = 4) -> list[tuple[date, str]]:
    """One warning per root with holes inside its sessions: their start and end, and that
    nothing was filled or computed across them."""
    out = []
    for root in sorted({h.root for h in holes}):
        mine = sorted((h for h in holes if h.root == root), key=lambda h: h.last_before)
        listed = "; ".join(f"{h.last_before:%Y-%m-%d %H:%M} .. {h.first_after:%Y-%m-%d %H:%M} UTC "
                           f"({h.open_minutes:.0f} min)" for h in mine[:shown])
        more = f"; and {len(mine) - shown} more" if len(mine) > shown else ""
        day = _trade_date(mine[0].first_after)
        out.append((day, f"features: {root} has {len(mine)} hole(s) inside its sessions, more open market "
                         f"without a bar than its {quiet_limit(root)}-minute no-trade limit ({listed}{more}): "
                         f"not filled, and no feature, return or target spans them (each restarts the "
                         f"warm-up)"))
    return out


SPILL_BYTES = 48 * 2**20  # rows of waiting dates held in memory; the rest wait on disk
WRITES_IN_FLIGHT = 2  # dates handed to the writer threads and not yet written, at most
# a segment's dates all complete when it ends (over a short history, most dates at the very
# end of the run), so two threads write: the parquet writer and the summary release the GIL
WRITERS = 2


class _DateBuffer:
    """Computed rows of dates whose other roots are still to come; a date is written once
    every segment trading on it is computed (or dropped, when one of them failed).

    A date waits for the longest segment trading on it (a quarterly contract's, some 65
    dates), so the rows waiting were the run's memory peak, growing with the history up
    to a contract's life. Beyond ``spill_bytes`` they wait in uncompressed Arrow IPC streams
    (a temporary directory beside the table on a local root, the system's otherwise),
    read back when their date is written: memory stays flat, equal rows either way.

    A complete date is written by one of ``WRITERS`` writer threads (``_write``: its
    parquet file, its summary, the removal of parts it no longer has), handed over in the
    order the dates complete, while the next segments are computed: the file's compression
    and fsync and the summary overlap the features of the next segment (and each other)
    instead of following them. At most ``WRITES_IN_FLIGHT`` dates wait for them; a failed
    write raises in the builder at the next date handed over, or at ``finish``."""

    def __init__(self, root: UPath, spans: list[Span], build: FeatureBuild, spill_bytes: int = SPILL_BYTES):
        self.root, self.build, self.spill_bytes = root, build, spill_bytes
        self.pending: Counter[date] = Counter(d for s in spans for d in s.days)
        self.parts: dict[date, dict[str, pl.DataFrame]] = {}
        self.spilled: dict[date, dict[str, Path]] = {}
        self.held = 0  # bytes in self.parts
        self.vetoed: set[date] = set()
        self._dir: Path | None = None
        self._writer = ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="features-writer")
        self._writes: deque[Future[tuple[date, int | None]]] = deque()

    def add(self, span: Span, frame: pl.DataFrame | None, passed: bool) -> None:
        if not passed:
            self.vetoed |= set(span.days)
        elif frame is not None:
            framed = frame.with_columns(_d=trade_date_expr())
            for (day,), part in framed.partition_by("_d", as_dict=True, maintain_order=True).items():
                part = part.drop("_d")
                size = part.estimated_size()
                if self.pending[day] > 1 and self.held + size > self.spill_bytes:
                    self.spilled.setdefault(day, {})[span.root] = self._spill(day, span.root, part)
                else:
                    self.parts.setdefault(day, {})[span.root] = part
                    self.held += size
        for day in span.days:
            self.pending[day] -= 1
            if self.pending[day] == 0:
                self._flush(day)

    def _spill(self, day: date, root: str, part: pl.DataFrame) -> Path:
        if self._dir is None:
            # named after its owner (host, pid): the start-up sweep removes the directory of
            # a run that was killed before ``close`` (``storage.scratch.sweep_tree``)
            local = sync.local_path(self.root / TABLE)
            base = Path(local) if local is not None else Path(tempfile.gettempdir())
            base.mkdir(parents=True, exist_ok=True)
            self._dir = temp_sibling(base / "spill")
            self._dir.mkdir()
        path = self._dir / f"{day.isoformat()}-{root}.arrow"
        part.write_ipc_stream(path, compression="uncompressed")  # twice as fast as the file format here
        return path

    def _take(self, day: date) -> dict[str, pl.DataFrame]:
        """The date's rows per root, out of memory and off the disk."""
        parts = self.parts.pop(day, {})
        self.held -= sum(p.estimated_size() for p in parts.values())
        for r, path in self.spilled.pop(day, {}).items():
            parts[r] = pl.read_ipc_stream(path)
            path.unlink()
        return parts

    def _flush(self, day: date) -> None:
        parts = self._take(day)
        if day in self.vetoed:
            return  # the previous version of the date stays
        frame = pl.concat([parts[r] for r in sorted(parts)], how="vertical") if parts else None
        del parts
        self._writes.append(self._writer.submit(self._write, day, frame))
        self._collect(WRITES_IN_FLIGHT)

    def _write(self, day: date, frame: pl.DataFrame | None) -> tuple[date, int | None]:
        """The date's file, its summary and the removal of its other parts (writer thread)."""
        if frame is not None:
            path = trade_dates.write_part(self.root, TABLE, day, frame, part=PART,
                                          compression=COMPRESSION)
            # the dataset step's summary of the date, from the rows in hand: reading every
            # features file back to summarise it made the full build ~2x the in-memory path
            dataset_store.store_features_summary(path, summarise_features(dataset_store.canonical(frame)))
        trade_dates.replace_date(self.root, TABLE, day, [PART] if frame is not None else [])
        return day, None if frame is None else frame.height

    def _collect(self, keep: int) -> None:
        """Wait for the oldest writes until ``keep`` are in flight (a failed one raises)."""
        while len(self._writes) > keep:
            day, rows = self._writes.popleft().result()
            if rows is not None:
                self.build.rows[day] = rows

    def finish(self) -> None:
        """Every date handed over is written (or its error raised)."""
        self._collect(0)

    def close(self) -> None:
        """Wait for the writer (a write is never left half done by the builder's error),
        then remove the spill directory."""
        self._writer.shutdown(wait=True)
        self._writes.clear()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def build_dates(root: UPath, start: date, end: date, cfg: FeatureConfig | None = None,
                validate=None, spill_bytes: int = SPILL_BYTES) -> FeatureBuild:
    """Write ``features/trade_date=D/data.parquet`` (every root's rows) for every date D in
    [start, end]; ``validate(frame) -> bool`` may veto a segment's rows (the dates it trades
    on keep their previous version). Returns the rows written per date and the warnings
    (stretches too short for the warm-up). ``spill_bytes``: rows of waiting dates held in
    memory (``_DateBuffer``)."""
    cfg = cfg or FeatureConfig()
    build = FeatureBuild()
    short: list[ShortStretch] = []
    holes: list[Hole] = []
    spans = segment_spans(continuous_dates.read_fronts(root), start, end)
    buffer = _DateBuffer(root, spans, build, spill_bytes)
    try:
        for span, frame, passed in feature_dates(root, start, end, cfg, validate, short, spans, holes):
            buffer.add(span, frame, passed)
        buffer.finish()
    finally:
        buffer.close()
    for day in trade_dates.stored_dates(root, TABLE):  # dates no segment trades on any more
        if start <= day <= end and day not in buffer.pending:
            trade_dates.replace_date(root, TABLE, day, [])
    build.notes += short_notes(short, cfg.warmup_bars, start, end)
    build.notes += hole_notes(holes)
    return build


__all__ = ["FeatureBuild", "Span", "build_dates", "feature_dates", "hole_notes", "segment_spans", "short_notes"]
