"""Issue 41: the walk-forward's row pool no longer holds a whole history in float64; its
folds' normalisation, computed a chunk of rows at a time, is bit for bit the whole-array
computation it replaced."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models.evaluation import row_pool as pool_module
from models.evaluation.row_pool import (
    PooledObserved,
    column_stats,
    fold_data,
    normalised,
    row_pool,
)
from models.evaluation.walk_forward import WalkForwardConfig, plan_folds
from tests.model_data import synthetic_training_data


def _values(n: int, width: int, seed: int, nan_share: float = 0.02) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, width)) * rng.uniform(0.01, 500.0, width) \
        + rng.uniform(-50, 50, width)
    x[rng.random(x.shape) < nan_share] = np.nan
    return x


def _pooled(x: np.ndarray, pieces: int = 3) -> PooledObserved:
    """``x`` (raw) as a pool over ``pieces`` float32 'splits' stored normalised, rows shuffled
    across them, with ``x``'s raw values exactly representable."""
    rng = np.random.default_rng(0)
    mean, std = rng.uniform(-1, 1, x.shape[1]), rng.uniform(0.5, 2, x.shape[1])
    source = rng.integers(0, pieces, x.shape[0])
    row = np.zeros(x.shape[0], np.int64)
    sources = []
    for s in range(pieces):
        at = np.flatnonzero(source == s)
        row[at] = np.arange(at.size)
        sources.append(((x[at] - mean) / std).astype(np.float32))
    return PooledObserved(sources, source, row, mean, std)


@pytest.mark.parametrize("nan_share", [0.0, 0.03])
def test_column_stats_equal_numpy_bit_for_bit_across_chunks(monkeypatch, nan_share):
    monkeypatch.setattr(pool_module, "CHUNK_ROWS", 1_000)  # many chunks
    pool = _pooled(_values(7_500, 9, seed=1, nan_share=nan_share))
    idx = np.sort(np.random.default_rng(2).choice(len(pool), 6_000, replace=False))
    whole = np.asarray(pool)[idx]
    mean, std = column_stats(pool, idx)
    np.testing.assert_array_equal(mean, np.nanmean(whole, axis=0))
    np.testing.assert_array_equal(std, np.nanstd(whole, axis=0))


def test_an_all_missing_column_is_nan_as_numpy_says(monkeypatch):
    monkeypatch.setattr(pool_module, "CHUNK_ROWS", 100)
    x = _values(450, 4, seed=3)
    x[:, 2] = np.nan
    pool = _pooled(x)
    mean, std = column_stats(pool, np.arange(450))
    assert np.isnan(mean[2]) and np.isnan(std[2])
    assert np.isfinite(mean[[0, 1, 3]]).all()


def test_normalised_equals_the_whole_array_expression(monkeypatch):
    monkeypatch.setattr(pool_module, "CHUNK_ROWS", 333)
    pool = _pooled(_values(2_000, 6, seed=4))
    idx = np.arange(100, 1_900)
    mean, std = np.nan_to_num(np.nanmean(np.asarray(pool)[idx], 0)), np.full(6, 3.0)
    expected = np.clip((np.asarray(pool)[idx] - mean) / std, -10, 10).astype(np.float32)
    np.testing.assert_array_equal(normalised(pool, idx, mean, std, 10.0), expected)


def test_fold_data_is_unchanged_from_the_whole_array_code(monkeypatch):
    """The fold's normalised parts as the code before issue 41 made them (raw float64 pool,
    ``np.nanmean`` / ``np.nanstd`` of the train part, then scale and clip)."""
    monkeypatch.setattr(pool_module, "CHUNK_ROWS", 500)
    data = synthetic_training_data(n_rows={"train": 2400, "validation": 700, "test": 700},
                                   n_observed=3, n_known=2, n_static=2, lookback=8, horizon=2,
                                   signal=0.4, segment_length=350, seed=3)
    data.splits["train"].observed[5:40, 1] = np.nan
    data.meta["normalization"] = {"mean": [0.5, -2.0, 30.0], "std": [0.1, 3.0, 7.5],
                                  "clip_sigma": 10.0}
    pool = row_pool(data, lambda ts: np.asarray(ts) // (6 * 3600 * 10**9))
    config = WalkForwardConfig(folds=3, test_days=2)
    fold = plan_folds(pool.dates, config)[1]
    got = fold_data(pool, fold, config)
    raw = np.asarray(pool.rows.observed)
    norm = data.meta["normalization"]
    parts = [data.splits[s] for s in ("train", "validation", "test")]
    old_raw = np.concatenate([np.asarray(p.observed, np.float64) * np.asarray(norm["std"])
                              + np.asarray(norm["mean"]) for p in parts])
    order = np.lexsort((np.concatenate([p.ts_event for p in parts]),
                        np.concatenate([p.root_index for p in parts])))
    np.testing.assert_array_equal(raw, old_raw[order])
    train = raw[np.isin(pool.dates, fold.train_dates)]
    mean = np.nan_to_num(np.nanmean(train, axis=0))
    std = np.nanstd(train, axis=0)
    std = np.where(np.isfinite(std) & (std > 1e-12), std, 1.0)
    assert got.meta["normalization"]["mean"] == mean.tolist()
    assert got.meta["normalization"]["std"] == std.tolist()
    expected = np.clip((train - mean) / std, -10, 10).astype(np.float32)
    np.testing.assert_array_equal(got.splits["train"].observed, expected)


def test_the_pool_holds_an_index_not_the_features():
    data = synthetic_training_data(n_rows={"train": 2400, "validation": 700, "test": 700},
                                   n_observed=40, n_known=2, n_static=2, lookback=8,
                                   horizon=2, segment_length=350, seed=5)
    pool = row_pool(data, lambda ts: np.asarray(ts) // (6 * 3600 * 10**9))
    features_f64 = pool.rows.n_rows * 40 * 8
    assert pool.rows.observed.nbytes < features_f64 / 10
    assert pool.rows.observed[np.arange(3)].shape == (3, 40)


def _mapped_rss_kb(path) -> int:
    """Resident kB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:  # a mapping's header line
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(head[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")
def test_reading_a_memory_mapped_split_leaves_its_pages_unmapped(tmp_path):
    """Issue 41: read through the pool, a mapped year's features do not stay in the
    process's resident memory (the page cache keeps them); the values are the file's."""
    x = _values(100_000, 20, seed=6, nan_share=0.0).astype(np.float32)  # 8 MB
    path = tmp_path / "observed.npy"
    np.save(path, x)
    mapped = np.load(path, mmap_mode="r")
    pool = PooledObserved([mapped], np.zeros(len(x), np.int64), np.arange(len(x)), None, None)
    np.testing.assert_array_equal(pool[np.arange(len(x))], x.astype(np.float64))
    assert _mapped_rss_kb(path) < 1024  # was ~7,800 kB: every page read stayed mapped
    assert float(mapped[-1, -1]) == float(x[-1, -1])  # the mapping still reads


def _fold(monkeypatch, spill_bytes: int):
    monkeypatch.setattr(pool_module, "CHUNK_ROWS", 500)
    monkeypatch.setattr(pool_module, "SPILL_BYTES", spill_bytes)
    data = synthetic_training_data(n_rows={"train": 2400, "validation": 700, "test": 700},
                                   n_observed=3, n_known=2, n_static=2, lookback=8, horizon=2,
                                   signal=0.4, segment_length=350, seed=3)
    data.meta["normalization"] = {"mean": [0.5, -2.0, 30.0], "std": [0.1, 3.0, 7.5],
                                  "clip_sigma": 10.0}
    pool = row_pool(data, lambda ts: np.asarray(ts) // (6 * 3600 * 10**9))
    config = WalkForwardConfig(folds=3, test_days=2)
    return fold_data(pool, plan_folds(pool.dates, config)[2], config)


def test_a_large_train_part_is_read_on_demand_with_the_held_values(monkeypatch):
    """Issue 41: a year's last fold trains on ~600k rows (630 MB of float32) of which its
    budget reads a sample; past ``SPILL_BYTES`` the part is kept in a temporary file and read
    from it: the same values, the same fold model and forecast keys."""
    from models.agents.forecast_memo import forecast_key
    from models.evaluation.family_candidates import fold_model_key
    from models.evaluation.row_pool import SpilledRows
    from models.tft.model import TemporalFusionTransformer, TFTConfig
    from models.training.loop import TrainConfig
    from models.windows import recent_rows

    held, lazy = _fold(monkeypatch, 2**40), _fold(monkeypatch, 0)
    h, v = held.splits["train"].observed, lazy.splits["train"].observed
    assert isinstance(h, np.ndarray) and isinstance(v, SpilledRows)
    assert v.shape == h.shape and v.dtype == h.dtype
    np.testing.assert_array_equal(np.asarray(v), h)
    starts = held.splits["train"].window_starts[:50]
    hist = starts[:, None] + np.arange(8)
    for key in (slice(100, 160), hist, (slice(None), [0, 2]), 7, np.array([3, 1, 2])):
        np.testing.assert_array_equal(v[key], h[key])
    batch_h = held.window_dataset("train").batch(np.arange(20))
    batch_v = lazy.window_dataset("train").batch(np.arange(20))
    assert all(np.array_equal(batch_h[k].numpy(), batch_v[k].numpy()) for k in batch_h)
    train = TrainConfig(epochs=1)
    config = {"n_static": 2, "n_observed": 3, "n_known": 2, "lookback": 8, "horizon": 2,
              "hidden": 8, "heads": 1}
    assert fold_model_key("tft", config, train, held) == fold_model_key("tft", config, train, lazy)
    model = TemporalFusionTransformer(TFTConfig.from_dict(config))
    assert forecast_key(model, held.splits["train"], 8, 2, 1024) == \
        forecast_key(model, lazy.splits["train"], 8, 2, 1024)
    cut_h = recent_rows(held, {"train": 300}).splits["train"].observed
    cut_v = recent_rows(lazy, {"train": 300}).splits["train"].observed
    assert isinstance(cut_v, np.ndarray)
    np.testing.assert_array_equal(cut_v, cut_h)


def test_a_fold_model_trained_on_a_part_read_on_demand_is_the_held_parts(monkeypatch):
    import torch

    from models.registry import build_model
    from models.training.loop import TrainConfig, train_forecaster

    config = {"n_static": 2, "n_observed": 3, "n_known": 2, "lookback": 8, "horizon": 2,
              "hidden": 8, "heads": 1, "dropout": 0.0}
    weights = []
    for spill_bytes in (2**40, 0):
        data = _fold(monkeypatch, spill_bytes)
        torch.manual_seed(0)
        model = build_model("tft", dict(config))
        train_forecaster(model, data, TrainConfig(epochs=1, batch_size=16, max_batches_per_epoch=3,
                                                  max_val_batches=1))
        weights.append(model.state_dict())
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
