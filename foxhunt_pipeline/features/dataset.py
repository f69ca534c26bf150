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

import numpy as np
import polars as pl

from foxhunt_pipeline.features.grid import trade_date_expr
from foxhunt_pipeline.instruments.specs import spec
from models.windows import DEFAULT_QUANTILES, SPLITS, SplitArrays, TrainingData, valid_window_starts

STD_FLOOR = 1e-12


class DatasetError(ValueError):
    """The features cannot make the requested dataset (e.g. a split would be empty)."""


@dataclass(frozen=True)
class DatasetConfig:
    lookback: int = 60
    horizon: int = 5
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15)
    embargo_bars: int | None = None  # None: lookback + horizon (the minimum allowed)
    cost_ticks: float = 1.0  # one-way cost of a position change, in ticks (half spread + slippage)
    fee_per_contract: float = 0.0  # exchange + broker fee per contract per side, in currency
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


def _names(
    features: pl.DataFrame, horizon: int
) -> tuple[list[str], list[str], list[str], list[str]]:
    cols = features.columns
    observed = [c for c in cols if c.startswith("f_")]
    known = [c for c in cols if c.startswith("k_")]
    static = [c for c in cols if c.startswith("s_")]
    targets = [f"y_{h}" for h in range(1, horizon + 1)]
    missing = [t for t in targets if t not in cols]
    if missing:
        raise DatasetError(f"features lack target columns {missing} needed for horizon {horizon}")
    if not observed:
        raise DatasetError("features have no observed f_* columns")
    return observed, known, static, targets


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


def _assign_splits(df: pl.DataFrame, cfg: DatasetConfig) -> tuple[pl.DataFrame, dict[str, list]]:
    """Whole trade dates go to one split; the fractions are of bars, not of dates, so a short
    first or last session (a partial day at the edge of the data) does not make a split empty."""
    per_date = df.group_by("_date").len().sort("_date")
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
    label = (
        pl.when(pl.col("_date") <= bounds["train"][-1])
        .then(pl.lit("train"))
        .when(pl.col("_date") <= bounds["validation"][-1])
        .then(pl.lit("validation"))
        .otherwise(pl.lit("test"))
    )
    df = df.with_columns(_split=label)
    pos = pl.int_range(pl.len()).over("_split", "root")
    df = df.filter((pl.col("_split") == "train") | (pos >= cfg.embargo))
    return df, bounds


def _price_levels(
    roots: list[str],
    train: pl.DataFrame,
    close_prices: pl.DataFrame | None,
    price_levels: Mapping[str, float] | None,
) -> tuple[dict[str, float], str]:
    if close_prices is not None:
        lo, hi = train["ts_event"].min(), train["ts_event"].max()
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


def build_training_dataset(
    features: pl.DataFrame,
    config: DatasetConfig | None = None,
    close_prices: pl.DataFrame | None = None,
    price_levels: Mapping[str, float] | None = None,
) -> TrainingData:
    """Split, embargo, normalise (train-only stats) and index windows.

    ``close_prices`` (e.g. continuous_bars: ts_event, root, close) gives the train median
    close per root for ``cost_log_return``; without it ``price_levels`` or the typical price
    of ``instruments.ROOTS`` is used (recorded in ``meta["cost_price_source"]``)."""
    cfg = config or DatasetConfig()
    observed, known, static, targets = _names(features, cfg.horizon)
    if features.is_empty():
        raise DatasetError("features table is empty: no dates available")
    df = features.sort("root", "ts_event").with_columns(
        _date=trade_date_expr(),
        _segment=(pl.struct("root", "contract_seq").rank("dense") - 1).cast(pl.Int32),
    )
    roots = df.get_column("root").unique(maintain_order=True).to_list()
    df = df.with_columns(
        _root_index=pl.col("root").replace_strict(
            roots, list(range(len(roots))), return_dtype=pl.Int16
        )
    )
    df, bounds = _assign_splits(df, cfg)
    parts = {name: df.filter(pl.col("_split") == name) for name in SPLITS}
    train = parts["train"]
    mean = train.select(pl.col(observed).cast(pl.Float64).mean()).row(0)
    std = train.select(pl.col(observed).cast(pl.Float64).std(ddof=0)).row(0)
    mean = np.nan_to_num(np.asarray(mean, dtype=np.float64))
    std = np.asarray(std, dtype=np.float64)
    std = np.where(np.isfinite(std) & (std > STD_FLOOR), std, 1.0)
    norm = [
        ((pl.col(c).cast(pl.Float64) - m) / s) for c, m, s in zip(observed, mean, std, strict=True)
    ]
    if cfg.clip_sigma is not None:
        norm = [e.clip(-cfg.clip_sigma, cfg.clip_sigma) for e in norm]
    norm = [e.cast(pl.Float32).alias(c) for e, c in zip(norm, observed, strict=True)]

    splits: dict[str, SplitArrays] = {}
    split_meta: dict[str, dict] = {}
    for name, part in parts.items():
        dates = part.get_column("_date")
        if part.is_empty():
            raise DatasetError(
                f"split {name!r} is empty after the {cfg.embargo}-bar embargo: its trade dates "
                f"{[str(d) for d in bounds[name]]} hold too few bars"
            )
        seg = part.get_column("_segment").to_numpy()
        tgt = part.select(pl.col(targets).cast(pl.Float32)).to_numpy(order="c")
        starts = valid_window_starts(seg, tgt, cfg.lookback, cfg.horizon)
        if starts.size == 0:
            raise DatasetError(
                f"split {name!r} has no complete window of {cfg.lookback}+{cfg.horizon} bars in one "
                f"contract; its trade dates: {[str(d) for d in bounds[name]]}"
            )
        splits[name] = SplitArrays(
            observed=part.select(norm).to_numpy(order="c"),
            known=part.select(pl.col(known).cast(pl.Float32))
            .to_numpy(order="c")
            .reshape(part.height, len(known)),
            static=part.select(pl.col(static).cast(pl.Float32))
            .to_numpy(order="c")
            .reshape(part.height, len(static)),
            targets=tgt,
            ts_event=part.get_column("ts_event").dt.epoch("ns").to_numpy().astype(np.int64),
            segment=seg.astype(np.int32),
            root_index=part.get_column("_root_index").to_numpy().astype(np.int16),
            window_starts=starts.astype(np.int64),
        )
        split_meta[name] = {
            "rows": part.height,
            "windows": int(starts.size),
            "first_date": str(dates.min()),
            "last_date": str(dates.max()),
            "first_ts": str(part["ts_event"].min()),
            "last_ts": str(part["ts_event"].max()),
        }
        del part
    y1 = splits["train"].targets[:, 0].astype(np.float64)
    scale = float(np.nanstd(y1)) if np.isfinite(y1).any() else 0.0
    levels, source = _price_levels(roots, train, close_prices, price_levels)
    costs = []
    for r in roots:
        sp = spec(r)
        cost_price = cfg.cost_ticks * sp.tick_size + cfg.fee_per_contract / sp.multiplier
        costs.append(float(np.log1p(cost_price / levels[r])))
    meta = {
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
    }
    return TrainingData(meta=meta, splits=splits)
