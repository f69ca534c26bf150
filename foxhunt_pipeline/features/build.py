"""``build_features``: continuous bars -> the features table (docs/contracts.md).

Per root: cut into stretches (a roll, a missing session or an outage inside one starts one:
``instruments.sessions``) -> regular grid within each ->
building blocks -> feature stages -> targets -> drop each stretch's warm-up rows ->
known-future and static inputs. Roots are processed one at a time so a root's rolling state never
depends on another root's rows and memory stays one root wide.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from datetime import date

import numpy as np
import polars as pl

from foxhunt_pipeline.features.calendar_inputs import KNOWN_NAMES, ROLL_LEAD_DAYS, with_known_inputs
from foxhunt_pipeline.features.grid import regular_grid, session_minute_expr, trade_date_expr
from foxhunt_pipeline.features.library import (
    FeatureConfig,
    base_exprs,
    ema_col,
    ema_spans,
    ewm,
    feature_names,
    feature_stages,
    shared_exprs,
)
from foxhunt_pipeline.features.static_inputs import STATIC_NAMES, static_exprs
from foxhunt_pipeline.features.targets import target_exprs, target_names
from foxhunt_pipeline.instruments.sessions import Hole, new_stretch, session_holes
from foxhunt_pipeline.instruments.specs import spec

log = logging.getLogger(__name__)

KEY_COLUMNS = ("ts_event", "root", "symbol", "contract_seq", "is_filled")
REQUIRED = {
    "ts_event": pl.Datetime("ns", "UTC"),
    "root": pl.String,
    "symbol": pl.String,
    "contract_seq": pl.Int32,
    "open": pl.Float64,
    "high": pl.Float64,
    "low": pl.Float64,
    "close": pl.Float64,
    "volume": None,  # any unsigned/signed integer
    "expiry": pl.Date,
}


class FeatureInputError(ValueError):
    """continuous_bars cannot be turned into features; the message names root / row / field."""


def output_columns(cfg: FeatureConfig) -> list[str]:
    return [
        *KEY_COLUMNS,
        *feature_names(cfg),
        *KNOWN_NAMES,
        *STATIC_NAMES,
        *target_names(cfg.horizons),
    ]


def check_continuous(df: pl.DataFrame) -> pl.DataFrame:
    """Validate the input contract; returns the frame sorted by (root, ts_event)."""
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise FeatureInputError(f"continuous_bars lacks columns {missing}; has {df.columns}")
    for c, dt in REQUIRED.items():
        if dt is not None and df.schema[c] != dt:
            raise FeatureInputError(
                f"continuous_bars column {c!r} is {df.schema[c]}, expected {dt}"
            )
    if not df.schema["volume"].is_integer():
        raise FeatureInputError(
            f"continuous_bars column 'volume' is {df.schema['volume']}, expected an integer"
        )
    price = ["open", "high", "low", "close"]
    bad = df.with_row_index("_row").filter(
        pl.any_horizontal(
            [pl.col(c).is_null() | ~pl.col(c).is_finite() | (pl.col(c) <= 0) for c in price]
        )
        | pl.col("expiry").is_null()
        | (pl.col("high") < pl.col("low"))
    )
    if bad.height:
        r = bad.row(0, named=True)
        raise FeatureInputError(
            f"continuous_bars has {bad.height} rows with a null, non-positive or non-finite price, "
            f"high < low, or no expiry; first at row {r['_row']}: root={r['root']} ts_event={r['ts_event']} "
            f"open={r['open']} high={r['high']} low={r['low']} close={r['close']} expiry={r['expiry']}"
        )
    same_root = pl.col("root") == pl.col("root").shift(1)
    in_order = (pl.col("root") > pl.col("root").shift(1)) | (
        same_root & (pl.col("ts_event") >= pl.col("ts_event").shift(1))
    )
    if not df.select(in_order.fill_null(True).all()).item():
        df = df.sort("root", "ts_event", maintain_order=True)
    dup = df.filter(
        (same_root & (pl.col("ts_event") == pl.col("ts_event").shift(1))).fill_null(False)
    )
    if dup.height:
        r = dup.row(0, named=True)
        raise FeatureInputError(
            f"continuous_bars has {dup.height} duplicate rows sharing (root, ts_event); first: "
            f"root={r['root']} ts_event={r['ts_event']}"
        )
    back = df.filter(
        (same_root & (pl.col("contract_seq") < pl.col("contract_seq").shift(1))).fill_null(False)
    )
    if back.height:
        r = back.row(0, named=True)
        raise FeatureInputError(
            f"contract_seq decreases in time for root={r['root']} at ts_event={r['ts_event']}"
        )
    return df


def _segment_features(seg: pl.DataFrame, cfg: FeatureConfig) -> pl.DataFrame:
    """One stretch of a (root, contract_seq) on its grid -> its f_* and y_* rows after the
    warm-up.

    A stretch at a time (``instruments.sessions``: no missing session inside): nothing can
    reach across a roll or a hole in the data, not even rolling-sum rounding state, and the
    working set stays cache- and memory-sized (time linear in rows).
    Eager, stage by stage: one lazy plan of ~250 windowed expressions costs seconds of query
    optimisation, far more than executing it."""
    df = seg.with_columns(
        _seg=pl.col("contract_seq"),
        _row=pl.int_range(pl.len(), dtype=pl.Int64),
        _pos=pl.int_range(pl.len(), dtype=pl.Int64),
        _sess=(pl.col("_td") != pl.col("_td").shift(1)).fill_null(True).cum_sum(),
    ).with_columns(_last_real=pl.when(~pl.col("is_filled")).then(pl.col("_row")).forward_fill())
    for stage in base_exprs():
        df = df.with_columns(stage)
    spans = ema_spans(cfg)
    if spans:
        df = df.with_columns([ewm(pl.col("close"), s).alias(ema_col(s)) for s in spans])
    shared = shared_exprs(cfg)
    if shared:
        df = df.with_columns(shared)
    for stage in feature_stages(cfg):
        df = df.with_columns(stage)
    df = df.with_columns(target_exprs(cfg.horizons))
    # only what the output and the calendar need, before the warm-up filter copies rows
    keep = [c for c in output_columns(cfg) if not c.startswith(("k_", "s_"))]
    return df.select(*keep, "expiry", "_td", "_sm", "_pos").filter(
        pl.col("_pos") >= cfg.warmup_bars
    )


@dataclass(frozen=True)
class ShortStretch:
    """A stretch (a contract's bars with no missing session) too short for the warm-up: it
    gives no features row."""

    root: str
    symbol: str
    first: date
    last: date
    bars: int  # on the grid


def root_features(bars: pl.DataFrame, root: str, cfg: FeatureConfig,
                   short: list[ShortStretch] | None = None,
                   holes: list[Hole] | None = None) -> pl.DataFrame | None:
    """One root's features (``bars`` in time order); the stretches shorter than the warm-up
    are appended to ``short``, the holes inside sessions that cut a stretch to ``holes``."""
    starts = new_stretch(bars, bar_seconds=cfg.bar_seconds)
    if holes is not None:
        holes += session_holes(bars, starts, cfg.bar_seconds)
    bars = bars.with_columns(_stretch=pl.Series(np.cumsum(starts), dtype=pl.Int32))
    grid = (
        regular_grid(bars, cfg.bar_seconds)
        if cfg.fill_grid
        else bars.with_columns(is_filled=pl.lit(False))
    )
    grid = grid.with_columns(
        _td=trade_date_expr(),
        _sm=session_minute_expr(),
        _roll_lead=pl.lit(float(ROLL_LEAD_DAYS[spec(root).asset_class])),
    )
    grid = grid.with_columns(_cpos=pl.int_range(pl.len(), dtype=pl.Int64).over("contract_seq"))
    parts = []
    for stretch in grid.partition_by("contract_seq", "_stretch", maintain_order=True):
        if stretch.height > cfg.warmup_bars:
            parts.append(_segment_features(stretch.drop("_stretch"), cfg))
        elif short is not None:
            short.append(ShortStretch(root, stretch["symbol"][0], stretch["_td"].min(),
                                      stretch["_td"].max(), stretch.height))
    del grid
    if not parts:
        return None
    out = pl.concat(parts, how="vertical", rechunk=False)
    del parts
    known = with_known_inputs(out.select("ts_event", "expiry", "_td", "_sm"), root)
    out = out.hstack(known.select(KNOWN_NAMES)).with_columns(static_exprs(root))
    return out.select(output_columns(cfg))


def build_features(continuous: pl.DataFrame, config: FeatureConfig | None = None) -> pl.DataFrame:
    """The features table: keys, ``is_filled``, ``f_*``, ``k_*``, ``s_*``, ``y_1..y_H``."""
    cfg = config or FeatureConfig()
    df = check_continuous(continuous)
    w = cfg.warmup_bars
    parts: list[pl.DataFrame] = []
    for (root,), bars in df.partition_by("root", as_dict=True, maintain_order=True).items():
        spec(root)  # unknown roots fail here, by name
        n = bars.height
        if n <= w:
            msg = f"root {root} has {n} bars, fewer than the feature warm-up of {w} bars"
            if cfg.min_rows_policy == "error":
                raise FeatureInputError(msg + "; set min_rows_policy='skip' to drop it")
            warnings.warn(msg + "; skipped", stacklevel=2)
            continue
        part = root_features(bars, root, cfg)
        if part is None:
            msg = f"root {root}: no contract has more than the feature warm-up of {w} bars"
            if cfg.min_rows_policy == "error":
                raise FeatureInputError(msg + "; set min_rows_policy='skip' to drop it")
            warnings.warn(msg + "; skipped", stacklevel=2)
            continue
        kept = set(part["contract_seq"].unique().to_list())
        short = sorted(set(bars["contract_seq"].unique().to_list()) - kept)
        if short:
            log.warning(
                "root %s: contracts %s shorter than the warm-up (%d bars) dropped", root, short, w
            )
        parts.append(part)
    if not parts:
        raise FeatureInputError(
            f"no root has more than the warm-up of {w} bars; roots: {df['root'].unique().to_list()}"
        )
    return pl.concat(parts, how="vertical")
