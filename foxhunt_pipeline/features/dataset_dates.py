"""The training dataset, incrementally: raw per-date blocks, split and normalised on read.

``features.dataset.build_training_dataset`` reads the whole history into split, normalised
arrays: its split is a fraction of all dates and its normalisation is fitted on the train
part, so every new date used to rebuild everything. Here each trade date is summarised
once, when its features arrive (``summarise``: row index, per-(root, contract) running
moments of the observed features, the cells that are not finite, the date's closes), and
stored with its features files as an immutable block (``storage.dataset_store``). An update
(``update``) summarises only the dates whose features changed and derives the split, the
embargo, the train-only normalisation (the moments of the train blocks combined: a new date
adds its moments, no pass over the wide history), the windows and every ``meta`` field of
the arrays builder from the summaries; readers materialise the arrays from the blocks
(``dataset_store.local_dir``), equal to the arrays builder's (within the float rounding of
the combined statistics).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np
import polars as pl
from upath import UPath

from foxhunt_pipeline.features.dataset import (
    ColumnGroups,
    DatasetConfig,
    DatasetError,
    Segments,
    dataset_meta,
    feature_columns,
    guarded_moments,
    rows_after_embargo,
    split_bounds,
    split_summary,
)
from foxhunt_pipeline.instruments.specs import spec
from foxhunt_pipeline.storage import continuous_dates, dataset_store, object_store, trade_dates
from models.windows import LAYOUT, SPLITS, SplitArrays, TrainingData, valid_window_starts

FEATURES = "features"
SUMMARY_VERSION = 1  # in every block name: a change of what a summary holds makes new blocks
_NF = ("observed_nan", "observed_inf", "known", "static", "targets")  # kinds of non-finite cells


def summarise(features: pl.DataFrame | None, closes: pl.DataFrame | None) -> dict[str, np.ndarray]:
    """One trade date's summary. ``features``: the date's rows in canonical order
    (``dataset_store.canonical``); ``closes``: its continuous_bars (root, ts_event, close).
    Units are the runs of one (root, contract) in that order."""
    return {**summarise_features(features), **summarise_closes(closes)}


@lru_cache(maxsize=8)
def _moment_exprs(observed: tuple[str, ...]) -> list[pl.Expr]:
    """Count, mean and variance of every observed column: built once per column set (building
    some 750 expressions per (root, contract) run cost more than computing them)."""
    as64 = [pl.col(c).cast(pl.Float64) for c in observed]
    return [*[e.count().cast(pl.Float64).alias(f"n{i}") for i, e in enumerate(as64)],
            *[e.mean().alias(f"m{i}") for i, e in enumerate(as64)],
            *[e.var(ddof=0).alias(f"v{i}") for i, e in enumerate(as64)]]


def unit_moments(observed: pl.DataFrame, new_unit: np.ndarray) -> np.ndarray:
    """[U, 3, F] count, mean and variance of each column over each unit (the rows from one
    ``new_unit`` flag to the next). One grouped pass over a sorted unit number: its groups
    are slices, aggregated by the kernels of a select on each slice (bit for bit, tested),
    at half the cost of one select per unit."""
    if not observed.width:
        return np.zeros((int(new_unit.sum()), 3, 0))
    unit = pl.Series("_unit", np.cumsum(new_unit)).set_sorted()
    stats = observed.with_columns(unit).group_by("_unit", maintain_order=True).agg(
        _moment_exprs(tuple(observed.columns))).drop("_unit")
    out = stats.to_numpy().astype(np.float64).reshape(-1, 3, observed.width)
    out[:, 2][out[:, 0] == 0] = np.nan  # a unit's column of nulls only: a select's variance is null too
    return out


def summarise_features(features: pl.DataFrame | None) -> dict[str, np.ndarray]:
    """The features part of ``summarise``: computed by the features writer as it writes a
    date (``store_features_summary``), or from the stored file where it did not."""
    out: dict[str, np.ndarray] = {}
    if features is None or not features.height:
        return out
    cols = features.columns
    observed = [c for c in cols if c.startswith("f_")]
    known = [c for c in cols if c.startswith("k_")]
    static = [c for c in cols if c.startswith("s_")]
    targets = sorted((c for c in cols if c.startswith("y_") and c[2:].isdigit()), key=lambda c: int(c[2:]))
    run = features.select(((pl.col("root") != pl.col("root").shift(1))
                           | (pl.col("contract_seq") != pl.col("contract_seq").shift(1)))
                          .fill_null(True).alias("b"))["b"].to_numpy()
    starts = np.flatnonzero(run)
    bounds = np.append(starts, features.height)
    moments = unit_moments(features.select(observed), run)  # [U, 3, F]: count, mean, variance (None -> NaN)
    x = features.select(observed).to_numpy()
    nan = np.isnan(x)
    if features.select(pl.sum_horizontal(pl.col(observed).null_count())).item():  # a null cell is a NaN one
        nan |= features.select(pl.col(observed).is_null()).to_numpy()
    cells = {
        "observed_nan": nan,
        "observed_inf": np.isinf(x),
        "known": ~np.isfinite(features.select(pl.col(known).cast(pl.Float32)).to_numpy()
                              .reshape(features.height, len(known))),
        "static": ~np.isfinite(features.select(pl.col(static).cast(pl.Float32)).to_numpy()
                               .reshape(features.height, len(static))),
    }
    y = features.select(pl.col(targets).cast(pl.Float32)).to_numpy().reshape(features.height, len(targets))
    cells["targets"] = np.isinf(y)
    for k in _NF:  # cells are rarely non-finite: a scan for any is ~100x cheaper than nonzero
        out[f"nf_{k}"] = (np.stack(np.nonzero(cells[k])).astype(np.int32) if cells[k].any()
                          else np.zeros((2, 0), np.int32))
    out.update(
        columns=np.asarray(cols), unit_root=features.get_column("root").gather(starts).to_numpy().astype(str),
        unit_seq=features.get_column("contract_seq").gather(starts).to_numpy().astype(np.int64),
        unit_bounds=bounds.astype(np.int64), moments=moments,
        ts=features.get_column("ts_event").dt.epoch("ns").to_numpy(),
        target_finite=np.isfinite(y), y1=y[:, 0] if y.shape[1] else np.zeros(features.height, np.float32))
    return out


def summarise_closes(closes: pl.DataFrame | None) -> dict[str, np.ndarray]:
    """The closes part of ``summarise`` (continuous_bars' root, ts_event, close)."""
    if closes is None or not closes.height:
        return {}
    c = closes.sort("root", "ts_event", maintain_order=True)
    return {"close_root": c.get_column("root").to_numpy().astype(str),
            "close_ts": c.get_column("ts_event").dt.epoch("ns").to_numpy(),
            "close": c.get_column("close").cast(pl.Float64).to_numpy()}


@dataclass
class DatasetUpdate:
    """What ``update`` made: the dataset's ``meta`` (with its layout), shape-only splits
    (the narrow arrays; for warnings and metadata), and how many blocks it summarised."""

    data: TrainingData
    layout: dict[str, Any]
    summarised: int = 0
    reused: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def meta(self) -> dict[str, Any]:
        return {**self.data.meta, LAYOUT: self.layout}


def _date_sources(root: UPath, first: date | None, last: date | None) -> dict[date, tuple[list, list]]:
    """(features parts, continuous_bars parts) of every stored date in [first, last]."""
    feats = trade_dates.date_parts(root, FEATURES)
    cont = trade_dates.date_parts(root, continuous_dates.TABLE)
    days = sorted(set(feats) | set(cont))
    return {d: (feats.get(d, []), cont.get(d, [])) for d in days
            if (first is None or d >= first) and (last is None or d <= last)}


def _block(root: UPath, day: date, feats: list[UPath], cont: list[UPath]) -> tuple[str, dict[str, np.ndarray] | None]:
    """The date's block, stored if new: (name, its summary when it was made now). The
    features part of the summary is the one the features writer kept beside the file
    (``dataset_store.features_summary``); the file is read only where there is none."""
    name = f"{day.isoformat()}-v{SUMMARY_VERSION}-{dataset_store.source_stamp([*feats, *cont])}"
    if dataset_store.has_block(root, name):
        return name, None
    summary = dataset_store.features_summary(feats[0]) if len(feats) == 1 else None
    if summary is None:
        frame = None
        if feats:
            frames = [object_store.read_parquet(p) for p in feats]
            frame = dataset_store.canonical(pl.concat(frames, how="vertical_relaxed") if len(frames) > 1 else frames[0])
        summary = summarise_features(frame)
    closes = None
    if cont:
        closes = pl.concat([object_store.read_parquet(p, columns=["root", "ts_event", "close"]) for p in cont],
                           how="vertical_relaxed")
    summary = {**summary, **summarise_closes(closes)}
    dataset_store.add_block(root, name, feats, summary)
    return name, summary


def update(root: UPath, config: DatasetConfig | None = None, first: date | None = None,
           last: date | None = None) -> DatasetUpdate:
    """Summarise the dates in [first, last] whose features changed since their block was
    stored and plan the dataset over all of them (nothing is published: see ``publish``)."""
    cfg = config or DatasetConfig()
    names, summaries, made = [], [], 0
    for day, (feats, cont) in _date_sources(root, first, last).items():
        name, summary = _block(root, day, feats, cont)
        made += summary is not None
        names.append(name)
        summaries.append((day, summary if summary is not None else dataset_store.read_summary(root, name)))
    out = plan(summaries, names, cfg)
    out.summarised, out.reused = made, len(names) - made
    return out


def publish(root: UPath, done: DatasetUpdate) -> str:
    return dataset_store.publish(root, done.meta)


def _combine(parts: Iterable[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and population std of the union of groups given as [3, F] (count, mean,
    variance) rows, combined pairwise (Chan et al.): stable whatever the number of dates.
    NaN in a group (a NaN value) stays NaN, as in a polars mean over the whole column."""
    n = m = m2 = None
    for g in parts:
        nb, mb, vb = g[0], np.nan_to_num(g[1], nan=0.0) * (g[0] > 0), np.nan_to_num(g[2], nan=0.0) * (g[0] > 0)
        nan = (g[0] > 0) & (np.isnan(g[1]) | np.isnan(g[2]))
        if n is None:
            n, m, m2 = nb.copy(), mb.copy(), vb * nb
            bad = nan.copy()
            continue
        tot = n + nb
        with np.errstate(invalid="ignore", divide="ignore"):
            delta = mb - m
            m = np.where(tot > 0, m + delta * np.where(tot > 0, nb / tot, 0.0), 0.0)
            m2 = m2 + vb * nb + np.where(tot > 0, delta * delta * n * nb / tot, 0.0)
        n = tot
        bad |= nan
    if n is None:
        return np.zeros(0), np.zeros(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, m, np.nan)
        std = np.sqrt(np.where(n > 0, m2 / n, np.nan))
    mean[bad], std[bad] = np.nan, np.nan
    return mean, std


class _Unit(NamedTuple):
    """A run of one root's rows of one contract in a date's block."""

    root: str
    day: date
    seq: int  # contract_seq
    block: int  # index of the date's block
    lo: int  # rows [lo, hi) of the block
    hi: int
    index: int  # the unit's place in the date's summary (its row of ``moments``)


def _units(with_rows: list[tuple[int, date, Mapping[str, np.ndarray]]]) -> list[_Unit]:
    """Every date's units, in date order."""
    units = []
    for i, d, s in with_rows:
        b = s["unit_bounds"]
        for u, (r, q) in enumerate(zip(s["unit_root"], s["unit_seq"], strict=True)):
            units.append(_Unit(str(r), d, int(q), i, int(b[u]), int(b[u + 1]), u))
    return units


@dataclass(frozen=True)
class _Blocks:
    """What a split's plan reads: the summaries by date and the dataset's numbering."""

    by_block: dict[date, Mapping[str, np.ndarray]]
    block_of: dict[date, int]
    segments: Segments
    t_idx: list[int]  # the dataset's targets among the summaries' target columns
    cfg: DatasetConfig


@dataclass
class _SplitPlan:
    """One split's rows as pieces of the date blocks, with the per-row arrays the plan
    needs (time, segment, root, whether the targets are finite) and non-finite counts."""

    widths: dict[str, int]
    pieces: list[list[int]] = field(default_factory=list)  # [block, lo, hi, root index, segment]
    ts: list[np.ndarray] = field(default_factory=list)
    seg: list[np.ndarray] = field(default_factory=list)
    root_index: list[np.ndarray] = field(default_factory=list)
    target_finite: list[np.ndarray] = field(default_factory=list)
    dates: list[date] = field(default_factory=list)
    y1: list[np.ndarray] = field(default_factory=list)
    counts: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.counts = {k: np.zeros(self.widths[k], np.int64) for k in self.widths}

    def add(self, unit: _Unit, start: int, ri: int, ctx: _Blocks, keep_y1: bool) -> None:
        """Rows [start, unit.hi) of the unit's block."""
        r, d, hi = unit.root, unit.day, unit.hi
        s = ctx.by_block[d]
        seg = ctx.segments.number(r, np.full(hi - start, unit.seq), s["ts"][start:hi])
        cuts = [0, *(np.flatnonzero(np.diff(seg)) + 1).tolist(), seg.size]  # a hole inside the date
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            self.pieces.append([ctx.block_of[d], start + a, start + b, ri, int(seg[a])])
        self.ts.append(s["ts"][start:hi])
        self.seg.append(seg)
        self.root_index.append(np.full(hi - start, ri, np.int16))
        self.target_finite.append(s["target_finite"][start:hi][:, ctx.t_idx].all(axis=1))
        self.dates.append(d)
        if keep_y1:
            self.y1.append(s["y1"][start:hi])
        _count_cells(self.counts, s, start, hi, ctx.cfg.clip_sigma, ctx.t_idx)

    def finish(self, name: str, bounds: dict[str, list],
               cfg: DatasetConfig) -> tuple[SplitArrays, dict[str, Any]]:
        """The split's shape-only arrays (time, segment, root, window starts) and its
        ``meta["splits"]`` entry."""
        ts = np.concatenate(self.ts) if self.ts else np.zeros(0, np.int64)
        seg = np.concatenate(self.seg) if self.seg else np.zeros(0, np.int32)
        finite = (np.where(np.concatenate(self.target_finite), 0.0, np.nan)[:, None]
                  if self.target_finite else np.zeros((0, 1)))
        starts = valid_window_starts(seg, finite, cfg.lookback, cfg.horizon)
        summary = split_summary(name, ts, starts, self.dates, bounds, cfg)
        split = dataset_store.shape_only(ts.size, self.widths, ts, seg,
                                         np.concatenate(self.root_index), starts.astype(np.int64))
        return split, summary

    def nonfinite(self, name: str, cols: ColumnGroups) -> dict[str, int]:
        """``meta["nonfinite"]`` entries of the split."""
        names = cols._asdict()
        return {f"{name}.{names[k][j]}": int(self.counts[k][j])
                for k in ("observed", "known", "static", "targets") for j in np.flatnonzero(self.counts[k])}


def _plan_split(name: str, units: list[_Unit], ctx: _Blocks, widths: dict[str, int]) -> _SplitPlan:
    """The split's pieces, root by root in date order, each root's first ``cfg.embargo``
    validation and test rows left out (``units``: the split's, in date order)."""
    part = _SplitPlan(widths)
    for ri, r in enumerate(ctx.segments.roots):
        seen = 0
        for unit in units:
            if unit.root != r:
                continue
            skip = 0 if name == "train" else max(ctx.cfg.embargo - seen, 0)
            seen += unit.hi - unit.lo
            start = unit.lo + min(skip, unit.hi - unit.lo)
            if start >= unit.hi:
                continue
            part.add(unit, start, ri, ctx, keep_y1=name == "train")
    return part


def plan(summaries: list[tuple[date, Mapping[str, np.ndarray]]], blocks: list[str], cfg: DatasetConfig
         ) -> DatasetUpdate:
    """The arrays builder's split, embargo, statistics, windows and ``meta``, from the
    summaries of its dates (in date order): see ``features.dataset.build_training_dataset``."""
    with_rows = [(i, d, s) for i, (d, s) in enumerate(summaries) if "ts" in s and s["ts"].size]
    if not with_rows:
        raise DatasetError("features table is empty: no dates available")
    columns = [str(c) for c in with_rows[0][2]["columns"]]
    cols = feature_columns(columns, cfg.horizon)
    all_targets = sorted((c for c in columns if c.startswith("y_") and c[2:].isdigit()), key=lambda c: int(c[2:]))
    per_date = pl.DataFrame({"_date": [d for _, d, _ in with_rows], "len": [int(s["ts"].size) for _, _, s in with_rows]},
                            schema={"_date": pl.Date, "len": pl.UInt32})
    bounds = split_bounds(per_date, cfg)
    split_of = {d: name for name in SPLITS for d in bounds[name]}
    units = _units(with_rows)
    segments = Segments.of(_unit_rows(units, dict(summaries)))
    rows_of: dict[tuple[str, str], int] = {}
    for u in units:
        rows_of[(split_of[u.day], u.root)] = rows_of.get((split_of[u.day], u.root), 0) + u.hi - u.lo
    rows_after_embargo(rows_of, segments.roots, cfg, bounds)
    by_block = dict(summaries)
    f_cols = [c for c in columns if c.startswith("f_")]
    f_pos = [f_cols.index(c) for c in cols.observed]
    train_units = [by_block[u.day]["moments"][u.index] for u in units if split_of[u.day] == "train"]
    mean, std = guarded_moments(*_combine(m[:, f_pos] for m in train_units))
    ctx = _Blocks(by_block, {d: i for i, (d, _) in enumerate(summaries)}, segments,
                  [all_targets.index(t) for t in cols.targets], cfg)
    layout: dict[str, Any] = {"blocks": blocks, "splits": {}}
    splits, split_meta = {}, {}
    nonfinite: dict[str, int] = {}
    train_lo = train_hi = None
    y1 = np.zeros(0)
    for name in SPLITS:
        part = _plan_split(name, [u for u in units if split_of[u.day] == name], ctx, cols.widths())
        splits[name], split_meta[name] = part.finish(name, bounds, cfg)
        layout["splits"][name] = {"rows": splits[name].n_rows, "pieces": part.pieces}
        if name == "train":
            train_lo, train_hi = int(splits[name].ts_event.min()), int(splits[name].ts_event.max())
            y1 = np.concatenate(part.y1).astype(np.float64) if part.y1 else np.zeros(0)
        nonfinite.update(part.nonfinite(name, cols))
    levels, source = _levels(segments.roots, summaries, train_lo, train_hi)
    meta = dataset_meta(cfg, cols, segments.roots, levels, source, y1, mean, std, split_meta, nonfinite)
    return DatasetUpdate(data=TrainingData(meta=meta, splits=splits), layout=layout)


def _unit_rows(units: list[_Unit], by_block: Mapping[date, Mapping[str, np.ndarray]]) -> pl.DataFrame:
    """(root, contract_seq, ts_event) of every row of ``units``: what ``Segments`` cuts."""
    if not units:
        return pl.DataFrame(schema={"root": pl.String, "contract_seq": pl.Int64,
                                    "ts_event": pl.Datetime("ns", "UTC")})
    sizes = [u.hi - u.lo for u in units]
    return pl.DataFrame({
        "root": np.repeat([u.root for u in units], sizes),
        "contract_seq": np.repeat([u.seq for u in units], sizes),
        "ts_event": np.concatenate([by_block[u.day]["ts"][u.lo:u.hi] for u in units]).astype(np.int64),
    }).with_columns(pl.col("ts_event").cast(pl.Datetime("ns", "UTC")))


def _count_cells(counts: dict[str, np.ndarray], s: Mapping[str, np.ndarray], lo: int, hi: int,
                 clip: float | None, t_idx: list[int]) -> None:
    """Non-finite cells of rows [lo, hi) per dataset column, as the arrays builder counts
    them on its arrays: NaN observed (inf too when nothing clips it), non-finite known and
    static inputs, infinite targets."""
    kinds = {"observed": ["observed_nan"] + (["observed_inf"] if clip is None else []),
             "known": ["known"], "static": ["static"], "targets": ["targets"]}
    for k, sources in kinds.items():
        for src in sources:
            cells = s.get(f"nf_{src}")
            if cells is None or not cells.size:
                continue
            rows, cols = cells
            inside = (rows >= lo) & (rows < hi)
            if inside.any():
                hits = np.bincount(cols[inside], minlength=max(len(t_idx), counts[k].size, int(cols.max()) + 1))
                counts[k] += hits[t_idx] if k == "targets" else hits[:counts[k].size]


def _levels(roots: list[str], summaries: list[tuple[date, Mapping[str, np.ndarray]]], lo: int | None,
            hi: int | None) -> tuple[dict[str, float], str]:
    """Train median close per root from the stored closes (continuous_bars of the dates in
    the dataset's window, between the first and last train bar), as the asset passes them;
    without any closes, ``instruments.ROOTS``' typical prices."""
    if not any("close" in s for _, s in summaries):
        return {r: float(spec(r).price_level) for r in roots}, "instruments.ROOTS price_level"
    closes: dict[str, list[np.ndarray]] = {}
    for _, s in summaries:
        if "close" not in s:
            continue
        inside = (s["close_ts"] >= lo) & (s["close_ts"] <= hi)
        if not inside.any():
            continue
        for r in np.unique(s["close_root"][inside]):
            closes.setdefault(str(r), []).append(s["close"][inside & (s["close_root"] == r)])
    missing = [r for r in roots if r not in closes]
    if missing:
        raise DatasetError(f"close_prices has no train-period closes for roots {missing}")
    return {r: float(np.median(np.concatenate(closes[r]))) for r in roots}, "train median close"


__all__ = ["DatasetUpdate", "plan", "publish", "summarise", "summarise_closes", "summarise_features", "update"]
