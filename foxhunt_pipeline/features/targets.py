"""Forward log returns ``y_h`` of close, within one contract (null where h bars are missing)."""

from __future__ import annotations

import polars as pl

SEGMENT = "_seg"  # integer id of (root, contract_seq), set by the feature builder


def target_names(horizons: int = 5) -> list[str]:
    return [f"y_{h}" for h in range(1, horizons + 1)]


def target_exprs(horizons: int = 5, log_close: str = "_lc") -> list[pl.Expr]:
    """``y_h[t] = log close[t+h] - log close[t]``; null unless row t+h is the same contract."""
    lc = pl.col(log_close)
    seg = pl.col(SEGMENT)
    return [
        pl.when(seg.shift(-h) == seg)
        .then(lc.shift(-h) - lc)
        .otherwise(None)
        .cast(pl.Float32)
        .alias(f"y_{h}")
        for h in range(1, horizons + 1)
    ]
