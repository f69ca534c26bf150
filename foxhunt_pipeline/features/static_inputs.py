"""Per-root constants (``s_*``): what kind of contract a row belongs to, in model-friendly scale."""

from __future__ import annotations

import math

import polars as pl

from foxhunt_pipeline.instruments.specs import spec

STATIC_NAMES: tuple[str, ...] = (
    "s_root_id",
    "s_asset_class_id",
    "s_log_tick_size",
    "s_log_multiplier",
    "s_log_tick_value",
    "s_log_daily_volume",
    "s_daily_vol",
)


def static_values(root: str) -> dict[str, float]:
    """The ``s_*`` values of one root, from ``foxhunt_pipeline.instruments.specs.ROOTS``."""
    s = spec(root)
    return {
        "s_root_id": float(s.root_id),
        "s_asset_class_id": float(s.asset_class_id),
        "s_log_tick_size": math.log(s.tick_size),
        "s_log_multiplier": math.log(s.multiplier),
        "s_log_tick_value": math.log(s.tick_value),
        "s_log_daily_volume": math.log(s.daily_volume),
        "s_daily_vol": float(s.daily_vol),
    }


def static_exprs(root: str) -> list[pl.Expr]:
    return [pl.lit(v, dtype=pl.Float32).alias(k) for k, v in static_values(root).items()]
