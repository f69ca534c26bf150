"""The per-unit moments of a features summary (``dataset_dates.unit_moments``, one grouped
pass) equal those of one select per unit, bit for bit: the training dataset's normalisation
is fitted on them, and its arrays must not move by a rounding."""

from __future__ import annotations

import numpy as np
import polars as pl

from foxhunt_pipeline.features.dataset_dates import _moment_exprs, unit_moments


def _per_unit_select(observed: pl.DataFrame, new_unit: np.ndarray) -> np.ndarray:
    """The way summaries were computed before: one select of every moment per unit."""
    bounds = np.append(np.flatnonzero(new_unit), observed.height)
    exprs = _moment_exprs(tuple(observed.columns))
    return np.stack([observed.slice(int(lo), int(hi - lo)).select(exprs).to_numpy().astype(np.float64)
                     .reshape(3, observed.width) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)])


def test_grouped_unit_moments_equal_one_select_per_unit_bit_for_bit():
    rng = np.random.default_rng(7)
    n, f = 4000, 40
    x = (rng.standard_normal((n, f)) * rng.lognormal(0, 3, f) + rng.standard_normal(f) * 1e3).astype(np.float32)
    x[rng.random((n, f)) < 0.01] = np.nan
    x[5, 3], x[9, 4], x[10, 4] = np.inf, -np.inf, np.inf  # inf - inf: a NaN from the kernel
    frame = pl.DataFrame(x, schema=[f"f_{i}" for i in range(f)])
    frame = frame.with_columns(pl.when(pl.int_range(pl.len()) % 97 == 0).then(None).otherwise(pl.col("f_7")).alias("f_7"),
                               pl.lit(None, pl.Float32).alias("f_all_null"))
    for cuts in ([0], [0, 1, 2, 1400, 2799, 3999], [0, 1000, 2000, 3000], list(range(0, n, 129))):
        new_unit = np.zeros(n, bool)
        new_unit[cuts] = True
        got, want = unit_moments(frame, new_unit), _per_unit_select(frame, new_unit)
        assert got.shape == want.shape == (len(cuts), 3, frame.width)
        assert got.tobytes() == want.tobytes()  # NaN, inf and all-null columns included


def test_no_observed_columns_give_empty_moments():
    assert unit_moments(pl.DataFrame({"x": [1.0, 2.0]}).select([]), np.array([True, False])).shape == (1, 3, 0)
