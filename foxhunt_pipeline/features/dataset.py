"""features table -> ``models.windows.TrainingData``: split, embargo, normalise, index windows.

* Chronological split by CME trade date (a session is never cut in two), fractions
  configurable (default 0.7 / 0.15 / 0.15).
* Embargo: the first ``embargo_bars`` rows (default lookback + horizon) of each root in the
  validation and test splits are dropped, so no validation / test window shares a bar with
  a train window or a train target's future, and likewise between validation and test.
* Normalisation: mean / std per observed feature fitted on train only (std ~0 -> 1) and
  stored in ``meta["normalization"]``; known, static inputs and targets are left raw.
* Stored compactly: one row matrix per split plus window start indices (``valid_window_starts``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import polars as pl

from foxhunt_pipeline.basics.utc import UTC_OFFSET, iso_utc
from foxhunt_pipeline.features.grid import trade_date_expr
from foxhunt_pipeline.instruments.rolls import trade_date_bounds
from foxhunt_pipeline.instruments.sessions import new_stretch
from foxhunt_pipeline.instruments.specs import spec
from models.windows import (
    DEFAULT_QUANTILES,
    SPLITS,
    NpyWriter,
    SplitArrays,
    TrainingData,
    valid_window_starts,
)

STD_FLOOR = 1e-12
CHUNK_ROWS = 50_000  # rows converted to arrays at a time
CHUNK_DATES = 60  # trade dates of one root read at a time: the peak is set by these, not the history


class DatasetError(ValueError):
    """The features cannot make the requested dataset (e.g. a split would be empty)."""


@dataclass(frozen=True)
class DatasetConfig:
    lookback: int = 60
    horizon: int = 5
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15)
    embargo_bars: int | None = None  # None: lookback + horizon (the minimum allowed)
    cost_ticks: float = 1.0  # one-way cost of a position change, in ticks (half spread + slippage)
    fee_per_contract: float = 1.0  # exchange + broker fee per contract per side, in currency
    bar_seconds: int = 60
    session_hours: float = 23.0  # CME Globex: 17:00-16:00 CT
    trading_days_per_year: int = 252
    clip_sigma: float | None = 10.0  # clip normalised observed features to +-clip_sigma

    @property
    def embargo(self) -> int:
        return self.lookback + self.horizon if self.embargo_bars is None else int(self.embargo_bars)

    @property
    def bars_per_year(self) -> int:
        return int(round(self.session_hours * 3600 / self.bar_seconds * self.trading_days_per_year))

    def __post_init__(self) -> None:
        if (
            len(self.fractions) != 3
            or min(self.fractions) <= 0
            or abs(sum(self.fractions) - 1) > 1e-6
        ):
            raise DatasetError(
                f"fractions must be three positive numbers summing to 1, got {self.fractions}"
            )
        if self.embargo < self.lookback + self.horizon:
            raise DatasetError(
                f"embargo_bars={self.embargo_bars} is below lookback + horizon = {self.lookback + self.horizon}"
            )


class ColumnGroups(NamedTuple):
    """A dataset's columns by kind: observed (``f_*``), known (``k_*``) and static (``s_*``)
    inputs, and the targets ``y_1 .. y_horizon``."""

    observed: list[str]
    known: list[str]
    static: list[str]
    targets: list[str]

    def widths(self) -> dict[str, int]:
        return {k: len(v) for k, v in self._asdict().items()}


def feature_columns(cols: list[str], horizon: int) -> ColumnGroups:
    observed = [c for c in cols if c.startswith("f_")]
    known = [c for c in cols if c.startswith("k_")]
    static = [c for c in cols if c.startswith("s_")]
    targets = [f"y_{h}" for h in range(1, horizon + 1)]
    missing = [t for t in targets if t not in cols]
    if missing:
        raise DatasetError(f"features lack target columns {missing} needed for horizon {horizon}")
    if not observed:
        raise DatasetError("features have no observed f_* columns")
    return ColumnGroups(observed, known, static, targets)


def feature_hash(
    observed: list[str],
    known: list[str],
    static: list[str],
    targets: list[str],
    config: DatasetConfig,
) -> str:
    payload = {
        "observed": observed,
        "known": known,
        "static": static,
        "targets": targets,
        "config": asdict(config),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def split_bounds(per_date: pl.DataFrame, cfg: DatasetConfig) -> dict[str, list]:
    """Whole trade dates go to one split; the fractions are of bars, not of dates, so a short
    first or last session (a partial day at the edge of the data) does not make a split empty.
    ``per_date``: ``_date`` and ``len`` (bars), in date order."""
    dates = per_date.get_column("_date").to_list()
    n = len(dates)
    counts = per_date.get_column("len").to_numpy().astype(np.float64)
    # share of bars up to each date's midpoint: a partial first or last session sides with its
    # neighbour instead of becoming a split of its own
    before = (np.cumsum(counts) - counts / 2) / max(counts.sum(), 1.0)
    cut1, cut2 = cfg.fractions[0], cfg.fractions[0] + cfg.fractions[1]
    bounds = {
        "train": [d for d, b in zip(dates, before, strict=True) if b < cut1],
        "validation": [d for d, b in zip(dates, before, strict=True) if cut1 <= b < cut2],
        "test": [d for d, b in zip(dates, before, strict=True) if b >= cut2],
    }
    avail = (
        f"{n} trade dates available: {dates[0]} .. {dates[-1]}" if dates else "no dates available"
    )
    for name, ds in bounds.items():
        if not ds:
            raise DatasetError(
                f"split {name!r} would be empty with fractions {cfg.fractions}: {avail} "
                f"({[str(d) for d in dates[:10]]}{' ...' if n > 10 else ''})"
            )
    return bounds


def _split_label(bounds: dict[str, list]) -> pl.Expr:
    return (
        pl.when(pl.col("_date") <= bounds["train"][-1])
        .then(pl.lit("train"))
        .when(pl.col("_date") <= bounds["validation"][-1])
        .then(pl.lit("validation"))
        .otherwise(pl.lit("test"))
    )


@dataclass(frozen=True)
class Segments:
    """A window never spans a roll or a hole in the data: its rows share (root,
    contract_seq, stretch) (``instruments.sessions``: a missing session, or more open market
    without a bar than the root's normal no-trade gap), numbered here in sorted order."""

    starts: dict[str, np.ndarray]  # root -> ts_event (ns) of the first row of each stretch
    segment_of: dict[tuple[str, int, int], int]  # (root, contract_seq, stretch) -> segment
    roots: list[str]  # in sorted order

    @classmethod
    def of(cls, rows: pl.DataFrame) -> Segments:
        """From the (root, contract_seq, ts_event) of every features row."""
        rows = rows.select("root", "contract_seq", "ts_event").sort("root", "ts_event")
        rows = rows.with_columns(_new=pl.Series(new_stretch(rows), dtype=pl.Boolean))
        starts: dict[str, np.ndarray] = {}
        keys: list[tuple[str, int, int]] = []
        for (root,), g in rows.partition_by("root", as_dict=True, maintain_order=True).items():
            ts = g.get_column("ts_event").dt.epoch("ns").to_numpy()
            starts[str(root)] = ts[g.get_column("_new").to_numpy()]
            stretch = np.cumsum(g.get_column("_new").to_numpy()) - 1
            pairs = pl.DataFrame({"q": g.get_column("contract_seq"), "k": stretch}).unique()
            keys += [(str(root), int(q), int(k)) for q, k in pairs.iter_rows()]
        segments = sorted(keys)
        roots = list(dict.fromkeys(r for r, _, _ in segments))
        return cls(starts, {key: i for i, key in enumerate(segments)}, roots)

    def number(self, root: str, seq: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """The segment of each row of ``root`` (its ``contract_seq`` and ``ts_event`` in ns)."""
        stretch = np.searchsorted(self.starts[root], np.asarray(ts, np.int64), side="right") - 1
        pairs = np.stack([np.asarray(seq, np.int64), stretch], axis=1)
        uniq, inverse = np.unique(pairs, axis=0, return_inverse=True)
        ids = np.asarray([self.segment_of[(root, int(q), int(k))] for q, k in uniq], np.int32)
        return ids[inverse.reshape(-1)]


def rows_after_embargo(rows: Mapping[tuple[str, str], int], roots: list[str], cfg: DatasetConfig,
                       bounds: dict[str, list]) -> dict[str, int]:
    """Rows of each split from the rows per (split, root): the first ``cfg.embargo`` of each
    root's validation and test rows are dropped. A split left empty is an error."""
    def kept(name: str, root: str) -> int:
        n = rows.get((name, root), 0)
        return n if name == "train" else max(n - cfg.embargo, 0)

    out = {name: sum(kept(name, r) for r in roots) for name in SPLITS}
    for name in SPLITS:
        if out[name] == 0:
            raise DatasetError(
                f"split {name!r} is empty after the {cfg.embargo}-bar embargo: its trade dates "
                f"{[str(d) for d in bounds[name]]} hold too few bars"
            )
    return out


def guarded_moments(mean: np.ndarray, std: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The normalisation of the observed inputs: a NaN mean becomes 0 and a non-finite or
    ~0 std 1, so such a column passes through unscaled."""
    return np.nan_to_num(mean), np.where(np.isfinite(std) & (std > STD_FLOOR), std, 1.0)


def split_summary(name: str, ts: np.ndarray, starts: np.ndarray, dates: list[date],
                  bounds: dict[str, list], cfg: DatasetConfig) -> dict[str, Any]:
    """A split's entry of ``meta["splits"]``; a split without a complete window is an error."""
    if starts.size == 0:
        raise DatasetError(
            f"split {name!r} has no complete window of {cfg.lookback}+{cfg.horizon} bars in one "
            f"contract; its trade dates: {[str(d) for d in bounds[name]]}"
        )
    return {
        "rows": int(ts.size),
        "windows": int(starts.size),
        "first_date": str(min(dates)),
        "last_date": str(max(dates)),
        # Python's str(datetime) form, as meta.json has always held it
        "first_ts": iso_utc(ts.min(), sep=" ", zone=UTC_OFFSET),
        "last_ts": iso_utc(ts.max(), sep=" ", zone=UTC_OFFSET),
    }


def _price_levels(
    roots: list[str],
    train_span: tuple,
    close_prices: pl.DataFrame | None,
    price_levels: Mapping[str, float] | None,
) -> tuple[dict[str, float], str]:
    if close_prices is not None:
        lo, hi = train_span
        med = (
            close_prices.filter(pl.col("ts_event").is_between(lo, hi))
            .group_by("root")
            .agg(pl.col("close").median())
        )
        levels = dict(zip(med["root"].to_list(), med["close"].to_list(), strict=True))
        missing = [r for r in roots if r not in levels]
        if missing:
            raise DatasetError(f"close_prices has no train-period closes for roots {missing}")
        return {r: float(levels[r]) for r in roots}, "train median close"
    if price_levels is not None:
        return {r: float(price_levels[r]) for r in roots}, "given price_levels"
    return {r: float(spec(r).price_level) for r in roots}, "instruments.ROOTS price_level"


BIG_ARRAYS = ("observed", "known", "static")  # streamed to files when out_dir is given


def _empty_split(rows: int, widths: dict[str, int], out: Path | None) -> dict:
    """The arrays of one split: in memory, or (``out``) the wide ones as .npy files written
    block by block, so the peak holds one block, not the split."""
    a: dict[str, Any] = {
        "targets": np.empty((rows, widths["targets"]), np.float32),
        "ts_event": np.empty(rows, np.int64),
        "segment": np.empty(rows, np.int32),
        "root_index": np.empty(rows, np.int16),
        "dates": [],
        "nonfinite": {k: np.zeros(widths[k], np.int64) for k in (*BIG_ARRAYS, "targets")},
    }
    for k in BIG_ARRAYS:
        a[k] = (NpyWriter(out / f"{k}.npy", rows, widths[k]) if out is not None
                else np.empty((rows, widths[k]), np.float32))
    return a


def _count_nonfinite(counts: dict, block: dict[str, np.ndarray]) -> None:
    """Per column: NaN / inf in model inputs, inf in targets (features.finite's rule)."""
    for k, arr in block.items():
        bad = np.isinf(arr) if k == "targets" else ~np.isfinite(arr)
        counts[k] += bad.sum(axis=0)


def _read_chunk(lf: pl.LazyFrame, root: str, first: date, last: date) -> pl.DataFrame:
    """The rows of ``root`` with trade dates in [first, last], in time order. The ``ts_event``
    bounds (a trade date starts the evening before) let the scan skip the other files."""
    lo, hi = trade_date_bounds(first, last)
    rows = lf.filter(
        (pl.col("root") == root) & pl.col("ts_event").is_between(lo, hi, closed="left")
        & pl.col("_date").is_between(first, last)
    ).collect()
    return rows if rows.get_column("ts_event").is_sorted() else rows.sort("ts_event")


@dataclass(frozen=True)
class _Inputs:
    """How feature rows become a split's rows: the column groups, the normalised observed
    inputs and the segment numbering."""

    cols: ColumnGroups
    norm: list[pl.Expr]
    segments: Segments


def _fill(a: dict, part: pl.DataFrame, offset: int, ri: int, root: str, inputs: _Inputs) -> None:
    """``part``'s rows into a split's arrays at ``offset``, CHUNK_ROWS at a time (the Float64
    temporaries of the normalisation stay small)."""
    _, known, static, targets = inputs.cols
    a["dates"] += [part.get_column("_date").min(), part.get_column("_date").max()]
    for lo in range(0, part.height, CHUNK_ROWS):
        chunk = part.slice(lo, CHUNK_ROWS)
        at = slice(offset + lo, offset + lo + chunk.height)
        block = {
            "observed": chunk.select(inputs.norm).to_numpy(),
            "known": chunk.select(pl.col(known).cast(pl.Float32)).to_numpy().reshape(chunk.height, len(known)),
            "static": chunk.select(pl.col(static).cast(pl.Float32)).to_numpy().reshape(chunk.height, len(static)),
            "targets": chunk.select(pl.col(targets).cast(pl.Float32)).to_numpy(),
        }
        _count_nonfinite(a["nonfinite"], block)
        for k, v in block.items():
            a[k][at] = v
        a["ts_event"][at] = chunk.get_column("ts_event").dt.epoch("ns").to_numpy()
        a["segment"][at] = inputs.segments.number(root, chunk.get_column("contract_seq").to_numpy(),
                                                  a["ts_event"][at])
        a["root_index"][at] = ri


def _train_moments(lf: pl.LazyFrame, observed: list[str]) -> tuple[np.ndarray, np.ndarray, tuple]:
    """Mean and population std of each observed input over the train split, and the span
    (first and last ``ts_event``) of the train rows."""
    moments = lf.filter(pl.col("_split") == "train").select(
        *[pl.col(c).cast(pl.Float64).mean().alias(f"m{i}") for i, c in enumerate(observed)],
        *[pl.col(c).cast(pl.Float64).std(ddof=0).alias(f"s{i}") for i, c in enumerate(observed)],
        pl.col("ts_event").min().alias("lo"), pl.col("ts_event").max().alias("hi"),
    ).collect().row(0, named=True)
    mean = np.asarray([moments[f"m{i}"] for i in range(len(observed))], dtype=np.float64)
    std = np.asarray([moments[f"s{i}"] for i in range(len(observed))], dtype=np.float64)
    return mean, std, (moments["lo"], moments["hi"])


def _normalised(observed: list[str], mean: np.ndarray, std: np.ndarray,
                clip_sigma: float | None) -> list[pl.Expr]:
    """The observed inputs as normalised Float32 expressions, clipped to +-``clip_sigma``."""
    norm = [
        ((pl.col(c).cast(pl.Float64) - m) / s) for c, m, s in zip(observed, mean, std, strict=True)
    ]
    if clip_sigma is not None:
        norm = [e.clip(-clip_sigma, clip_sigma) for e in norm]
    return [e.cast(pl.Float32).alias(c) for e, c in zip(norm, observed, strict=True)]


def _fill_splits(lf: pl.LazyFrame, dates: list[date], arrays: dict[str, dict], inputs: _Inputs,
                 cfg: DatasetConfig) -> None:
    """Every split's arrays, one root and ``CHUNK_DATES`` trade dates in memory at a time,
    in time order, each root's first ``cfg.embargo`` validation and test rows left out."""
    offset = dict.fromkeys(SPLITS, 0)
    for ri, r in enumerate(inputs.segments.roots):
        seen = dict.fromkeys(SPLITS, 0)  # rows of (split, root) so far: the embargo spans chunks
        for i in range(0, len(dates), CHUNK_DATES):
            rows = _read_chunk(lf, r, dates[i], dates[min(i + CHUNK_DATES, len(dates)) - 1])
            for name in SPLITS:
                part = rows.filter(pl.col("_split") == name)
                skip = 0 if name == "train" else max(cfg.embargo - seen[name], 0)
                seen[name] += part.height
                part = part.slice(skip)
                if part.is_empty():
                    continue
                _fill(arrays[name], part, offset[name], ri, r, inputs)
                offset[name] += part.height


def _finish_split(name: str, a: dict, bounds: dict[str, list],
                  cfg: DatasetConfig) -> tuple[SplitArrays, dict[str, Any]]:
    """A filled split's arrays with its window starts, and its ``meta["splits"]`` entry."""
    starts = valid_window_starts(a["segment"], a["targets"], cfg.lookback, cfg.horizon)
    summary = split_summary(name, a["ts_event"], starts, a["dates"], bounds, cfg)
    split = SplitArrays(
        observed=a["observed"], known=a["known"], static=a["static"], targets=a["targets"],
        ts_event=a["ts_event"], segment=a["segment"], root_index=a["root_index"],
        window_starts=starts.astype(np.int64),
    )
    return split, summary


def _save(out_dir: Path, arrays: dict[str, dict], splits: dict[str, SplitArrays],
          meta: dict[str, Any]) -> TrainingData:
    """The wide arrays are already in ``out_dir``: the narrow ones and meta.json join them;
    the dataset read back memory-mapped."""
    for name, split in splits.items():
        for k in BIG_ARRAYS:
            arrays[name][k].close()
        for k in ("targets", "ts_event", "segment", "root_index", "window_starts"):
            np.save(Path(out_dir) / name / f"{k}.npy", getattr(split, k), allow_pickle=False)
    TrainingData(meta=meta).write_into(Path(out_dir))
    return TrainingData.load(out_dir, mmap=True)


def build_training_dataset(
    features: pl.DataFrame | pl.LazyFrame,
    config: DatasetConfig | None = None,
    close_prices: pl.DataFrame | None = None,
    price_levels: Mapping[str, float] | None = None,
    out_dir: Path | None = None,
) -> TrainingData:
    """Split, embargo, normalise (train-only stats) and index windows.

    ``features`` may be lazy (the partitioned table's scan): it is read one root and
    ``CHUNK_DATES`` trade dates at a time into arrays allocated once. With ``out_dir`` (an
    empty or missing directory) the wide arrays are written there block by block and the
    dataset is returned memory-mapped from it, so the peak is set by a chunk, whatever the
    length of the history. ``close_prices`` (e.g. continuous_bars: ts_event,
    root, close) gives the train median close per root for ``cost_log_return``; without it
    ``price_levels`` or the typical price of ``instruments.ROOTS`` is used (recorded in
    ``meta["cost_price_source"]``)."""
    cfg = config or DatasetConfig()
    lf = features.lazy().with_columns(_date=trade_date_expr())
    cols = feature_columns(features.lazy().collect_schema().names(), cfg.horizon)
    per_date = lf.group_by("_date").len().sort("_date").collect()
    if per_date.is_empty():
        raise DatasetError("features table is empty: no dates available")
    bounds = split_bounds(per_date, cfg)
    lf = lf.with_columns(_split=_split_label(bounds))
    segments = Segments.of(lf.select("root", "contract_seq", "ts_event").collect())
    counts = dict(((sp, r), n) for sp, r, n in lf.group_by("_split", "root").len().collect().iter_rows())
    mean, std, train_span = _train_moments(lf, cols.observed)
    mean, std = guarded_moments(mean, std)
    inputs = _Inputs(cols, _normalised(cols.observed, mean, std, cfg.clip_sigma), segments)
    rows = rows_after_embargo(counts, segments.roots, cfg, bounds)
    arrays = {name: _empty_split(rows[name], cols.widths(),
                                 None if out_dir is None else Path(out_dir) / name)
              for name in SPLITS}
    _fill_splits(lf, per_date.get_column("_date").to_list(), arrays, inputs, cfg)
    splits: dict[str, SplitArrays] = {}
    split_meta: dict[str, dict] = {}
    for name in SPLITS:
        splits[name], split_meta[name] = _finish_split(name, arrays[name], bounds, cfg)
    levels, source = _price_levels(segments.roots, train_span, close_prices, price_levels)
    # counted while building (features.finite's rule and naming): checking a dataset
    # stored on disk would read it all back
    nonfinite = _nonfinite_names(arrays, cols._asdict())
    meta = dataset_meta(cfg, cols, segments.roots, levels, source,
                        splits["train"].targets[:, 0], mean, std, split_meta, nonfinite)
    return TrainingData(meta=meta, splits=splits) if out_dir is None else _save(out_dir, arrays, splits, meta)


def dataset_meta(cfg: DatasetConfig, names: tuple[list[str], list[str], list[str], list[str]],
                 roots: list[str], levels: Mapping[str, float], source: str,
                 train_next_return: np.ndarray, mean: np.ndarray, std: np.ndarray,
                 split_meta: dict[str, Any], nonfinite: dict[str, int]) -> dict[str, Any]:
    """A dataset's ``meta.json``: one definition for the whole-history builder and the
    per-date one (``dataset_dates``), so both describe a dataset the same way."""
    observed, known, static, targets = names
    y1 = np.asarray(train_next_return, np.float64)
    scale = float(np.nanstd(y1)) if np.isfinite(y1).any() else 0.0
    costs = []
    for r in roots:
        sp = spec(r)
        cost_price = cfg.cost_ticks * sp.tick_size + cfg.fee_per_contract / sp.multiplier
        costs.append(float(np.log1p(cost_price / levels[r])))
    return {
        "format_version": 1,
        "lookback": cfg.lookback,
        "horizon": cfg.horizon,
        "quantiles": list(DEFAULT_QUANTILES),
        "observed_names": observed,
        "known_names": known,
        "static_names": static,
        "target_names": targets,
        "roots": roots,
        "cost_log_return": costs,
        "cost_price_source": source,
        "price_levels": [levels[r] for r in roots],
        "bar_seconds": cfg.bar_seconds,
        "bars_per_year": cfg.bars_per_year,
        "target_scale": scale if np.isfinite(scale) and scale > 0 else 1.0,
        "feature_count": len(observed),
        "feature_hash": feature_hash(observed, known, static, targets, cfg),
        "embargo_bars": cfg.embargo,
        "normalization": {"mean": mean.tolist(), "std": std.tolist(), "clip_sigma": cfg.clip_sigma},
        "dataset_config": asdict(cfg),
        "splits": split_meta,
        "nonfinite": nonfinite,
    }


def _nonfinite_names(arrays: dict, names: dict[str, list[str]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for split in SPLITS:
        for k in (*BIG_ARRAYS, "targets"):
            for i in np.flatnonzero(arrays[split]["nonfinite"][k]):
                out[f"{split}.{names[k][i]}"] = int(arrays[split]["nonfinite"][k][i])
    return out
