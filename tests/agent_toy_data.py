"""A tiny deterministic market with an obvious optimal policy, for agent tests and demos.

Returns come in blocks of ``trend_length`` bars of ``+step`` then ``-step``. Feature ``f_0`` at
row t is the sign of the *last* return (row t-1 to t, known at t's close), so following it is
right on all but the first bar of each block. A learner that reads the window should find it
within a few thousand steps; a random policy earns about minus its costs.
"""

from __future__ import annotations

import numpy as np

from models.windows import DEFAULT_QUANTILES, SplitArrays, TrainingData, valid_window_starts


def trend_training_data(
    n_rows: dict[str, int] | None = None,
    trend_length: int = 8,
    step: float = 1e-3,
    cost: float = 1e-4,
    lookback: int = 4,
    horizon: int = 1,
    n_noise: int = 1,
    n_known: int = 1,
    segment_length: int = 500,
    session_length: int | None = None,
    seed: int = 0,
) -> TrainingData:
    """Splits in the real ``TrainingData`` format; ``session_length`` inserts a one-hour ts
    gap every that many rows (a session break inside a segment)."""
    rng = np.random.default_rng(seed)
    n_rows = dict(n_rows or {"train": 2000, "validation": 600, "test": 600})
    splits: dict[str, SplitArrays] = {}
    t0 = np.int64(1_704_067_200_000_000_000)
    seg_base = 0
    for k, (name, n) in enumerate(n_rows.items()):
        phase = int(rng.integers(2 * trend_length)) + k
        sign = np.where(((np.arange(n) + phase) // trend_length) % 2 == 0, 1.0, -1.0)
        ret = sign * step  # ret[i]: close i -> close i+1
        last_ret_sign = np.concatenate([[0.0], sign[:-1]])
        observed = np.zeros((n, 1 + n_noise), dtype=np.float32)
        observed[:, 0] = last_ret_sign
        observed[:, 1:] = rng.standard_normal((n, n_noise))
        known = rng.standard_normal((n, n_known)).astype(np.float32) * 0.1
        segment = (seg_base + np.arange(n) // segment_length).astype(np.int32)
        seg_base = int(segment[-1]) + 1
        targets = np.full((n, horizon), np.nan, dtype=np.float32)
        csum = np.concatenate([[0.0], np.cumsum(ret)])
        idx = np.arange(n)
        for h in range(1, horizon + 1):
            j = np.minimum(idx + h, n - 1)
            ok = (idx + h < n) & (segment[j] == segment)
            targets[ok, h - 1] = (csum[np.minimum(idx + h, n)] - csum[idx])[ok]
        spacing = np.full(n, 60_000_000_000, dtype=np.int64)
        spacing[0] = 0
        if session_length:
            spacing[session_length::session_length] = 3_600_000_000_000
        ts = t0 + np.cumsum(spacing)
        t0 = ts[-1] + 86_400_000_000_000
        root_index = np.zeros(n, dtype=np.int16)
        splits[name] = SplitArrays(
            observed=observed,
            known=known,
            static=np.zeros((n, 1), dtype=np.float32),
            targets=targets,
            ts_event=ts,
            segment=segment,
            root_index=root_index,
            window_starts=valid_window_starts(segment, targets, lookback, horizon),
        )
    meta = {
        "format_version": 1,
        "lookback": lookback,
        "horizon": horizon,
        "quantiles": list(DEFAULT_QUANTILES),
        "observed_names": ["f_last_sign"] + [f"f_noise_{i}" for i in range(n_noise)],
        "known_names": [f"k_{i}" for i in range(n_known)],
        "static_names": ["s_root"],
        "target_names": [f"y_{h}" for h in range(1, horizon + 1)],
        "roots": ["ES"],
        "cost_log_return": [cost],
        "bar_seconds": 60,
        "bars_per_year": 252 * 1380,
        "target_scale": float(step),
        "feature_hash": "trend-toy",
        "splits": {k: {"rows": v.n_rows, "windows": v.n_windows} for k, v in splits.items()},
    }
    return TrainingData(meta=meta, splits=splits)
