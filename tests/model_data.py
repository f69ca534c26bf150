"""A small training dataset in the real on-disk format, for the tests (and benchmarks) of
models that should not need the ingestion and feature layers."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from models.windows import DEFAULT_QUANTILES, SplitArrays, TrainingData, valid_window_starts


def synthetic_training_data(
    n_rows: Mapping[str, int] | None = None,
    n_observed: int = 12,
    n_known: int = 10,
    n_static: int = 5,
    lookback: int = 60,
    horizon: int = 5,
    signal: float = 0.5,
    segment_length: int = 400,
    seed: int = 0,
) -> TrainingData:
    """A small dataset in the real format, for tests of models that should not need
    the ingestion and feature layers. ``observed[:, 0]`` carries a lagged signal of
    the next return with strength ``signal`` (0 = pure noise)."""
    rng = np.random.default_rng(seed)
    n_rows = dict(n_rows or {"train": 3000, "validation": 800, "test": 800})
    splits: dict[str, SplitArrays] = {}
    t0 = np.int64(1_704_067_200_000_000_000)  # 2024-01-01T00:00Z
    seg_base = 0
    for name, n in n_rows.items():
        ret = rng.standard_normal(n) * 1e-3
        observed = rng.standard_normal((n, n_observed)).astype(np.float32)
        # ret[i] is the return from row i to row i + 1, so observed[i, 0] predicts targets[i, 0]
        observed[:, 0] = (signal * ret / 1e-3 + np.sqrt(max(1 - signal**2, 0.0)) * observed[:, 0]).astype(np.float32)
        minute = np.arange(n) % 1380
        known = np.zeros((n, n_known), dtype=np.float32)
        known[:, 0] = np.sin(2 * np.pi * minute / 1380)
        known[:, 1] = np.cos(2 * np.pi * minute / 1380)
        if n_known > 2:
            known[:, 2:] = rng.standard_normal((n, n_known - 2)) * 0.1
        segment = (seg_base + np.arange(n) // segment_length).astype(np.int32)
        seg_base = int(segment[-1]) + 1
        targets = np.full((n, horizon), np.nan, dtype=np.float32)
        for h in range(1, horizon + 1):
            csum = np.concatenate([[0.0], np.cumsum(ret)])
            fwd = csum[np.minimum(np.arange(n) + h, n)] - csum[np.arange(n)]
            ok = (np.arange(n) + h < n) & (segment[np.minimum(np.arange(n) + h, n - 1)] == segment)
            targets[ok, h - 1] = fwd[ok]
        root_index = (segment % 2).astype(np.int16)
        static = np.stack([np.full(n, v, dtype=np.float32) for v in range(n_static)], axis=1)
        static[:, 0] = root_index
        ts = t0 + np.arange(n, dtype=np.int64) * 60_000_000_000
        t0 = ts[-1] + 86_400_000_000_000
        splits[name] = SplitArrays(
            observed=observed,
            known=known,
            static=static,
            targets=targets,
            ts_event=ts,
            segment=segment,
            root_index=root_index,
            window_starts=valid_window_starts(segment, targets, lookback, horizon),
        )
    h1 = splits["train"].targets[:, 0] if "train" in splits else next(iter(splits.values())).targets[:, 0]
    meta = {
        "format_version": 1,
        "lookback": lookback,
        "horizon": horizon,
        "quantiles": list(DEFAULT_QUANTILES),
        "observed_names": [f"f_{i}" for i in range(n_observed)],
        "known_names": [f"k_{i}" for i in range(n_known)],
        "static_names": [f"s_{i}" for i in range(n_static)],
        "target_names": [f"y_{h}" for h in range(1, horizon + 1)],
        "roots": ["ES", "ZN"],
        "cost_log_return": [2e-5, 2e-5],
        "bar_seconds": 60,
        "bars_per_year": 252 * 1380,
        "target_scale": float(np.nanstd(h1)),
        "feature_hash": "synthetic",
        "splits": {k: {"rows": v.n_rows, "windows": v.n_windows} for k, v in splits.items()},
    }
    return TrainingData(meta=meta, splits=splits)
