"""features -> TrainingData: chronological split, embargo, train-only normalisation, meta."""

from __future__ import annotations

from datetime import date
from functools import lru_cache

import numpy as np
import polars as pl
import pytest

from foxhunt_pipeline.features import build_features
from foxhunt_pipeline.features.dataset import DatasetConfig, DatasetError, build_training_dataset
from foxhunt_pipeline.features.grid import trade_date_expr
from foxhunt_pipeline.instruments.specs import ROOTS
from models.windows import TrainingData
from tests.features_fixtures import make_continuous
from tests.model_data import synthetic_training_data

CFG = DatasetConfig()


@lru_cache(maxsize=1)
def bars() -> pl.DataFrame:
    return make_continuous(
        days=10, roots=("ES", "ZN"), roll_after_day=4, session_fraction=0.3, start=date(2024, 3, 4)
    )


@lru_cache(maxsize=1)
def feats() -> pl.DataFrame:
    return build_features(bars())


@lru_cache(maxsize=1)
def data() -> TrainingData:
    return build_training_dataset(feats(), CFG, close_prices=bars())


def test_meta_has_every_key_the_synthetic_dataset_has():
    td = data()
    ref = synthetic_training_data(n_rows={"train": 200, "validation": 100, "test": 100})
    assert set(ref.meta) <= set(td.meta)
    f = feats()
    assert td.observed_names == [c for c in f.columns if c.startswith("f_")]
    assert td.known_names == [c for c in f.columns if c.startswith("k_")]
    assert td.static_names == [c for c in f.columns if c.startswith("s_")]
    assert td.meta["target_names"] == [f"y_{h}" for h in range(1, 6)]
    assert td.meta["roots"] == ["ES", "ZN"]
    assert td.meta["bars_per_year"] == 347_760
    assert td.meta["feature_count"] == len(td.observed_names)
    assert len(td.meta["feature_hash"]) == 64
    for name, s in td.splits.items():
        assert td.meta["splits"][name]["rows"] == s.n_rows
        assert td.meta["splits"][name]["windows"] == s.n_windows > 0
        assert s.observed.dtype == np.float32 and s.observed.flags.c_contiguous
        assert s.observed.shape[1] == len(td.observed_names)


def test_split_is_chronological_by_date_with_an_embargo():
    td = data()
    emb = CFG.lookback + CFG.horizon
    assert td.meta["embargo_bars"] == emb
    ts = {k: s.ts_event for k, s in td.splits.items()}
    assert ts["train"].max() < ts["validation"].min() and ts["validation"].max() < ts["test"].min()
    dates = {k: td.meta["splits"][k] for k in td.splits}
    assert (
        dates["train"]["last_date"]
        < dates["validation"]["first_date"]
        <= dates["validation"]["last_date"]
    )
    assert dates["validation"]["last_date"] < dates["test"]["first_date"]
    # the first `emb` bars of each root's validation / test period are gone
    f = feats().with_columns(_d=trade_date_expr())
    for split in ("validation", "test"):
        first = date.fromisoformat(dates[split]["first_date"])
        for root_i, root in enumerate(td.meta["roots"]):
            period = f.filter((pl.col("root") == root) & (pl.col("_d") >= first))[
                "ts_event"
            ].dt.epoch("ns")
            kept = td.splits[split].ts_event[td.splits[split].root_index == root_i]
            assert kept.min() == period.sort()[emb]


def test_normalisation_is_fitted_on_train_only():
    td = data()
    tr = td.splits["train"].observed.astype(np.float64)
    mean, std = tr.mean(axis=0), tr.std(axis=0)
    spread = np.asarray(td.meta["normalization"]["std"])
    live = spread != 1.0
    np.testing.assert_allclose(mean[live], 0.0, atol=0.05)  # clipping moves it a little
    assert np.all(std[live] < 1.05)
    # a constant feature (static per root inside one root, or zero std) does not blow up
    assert np.isfinite(td.splits["test"].observed).all()
    # the statistics do not move when validation / test rows change
    f = feats()
    late = f.with_columns(
        pl.when(trade_date_expr() > date.fromisoformat(td.meta["splits"]["train"]["last_date"]))
        .then(pl.col("f_ret_1b") * 100)
        .otherwise(pl.col("f_ret_1b"))
    )
    td2 = build_training_dataset(late, CFG, close_prices=bars())
    assert td2.meta["normalization"]["mean"] == td.meta["normalization"]["mean"]


def test_windows_stay_in_one_contract_and_have_targets():
    td = data()
    for s in td.splits.values():
        w = s.window_starts
        span = CFG.lookback + CFG.horizon
        assert (s.segment[w] == s.segment[w + span - 1]).all()
        assert np.isfinite(s.targets[w + CFG.lookback - 1]).all()
    batch = td.window_dataset("train").batch(np.arange(4))
    assert batch["observed"].shape == (4, 60, len(td.observed_names))
    assert batch["known"].shape == (4, 65, len(td.known_names))


def test_costs_targets_scale_and_round_trip(tmp_path):
    td = data()
    for i, root in enumerate(td.meta["roots"]):
        level = bars().filter(pl.col("root") == root)["close"].median()
        # one tick plus the fee (1.0 per contract, the default) in price units, per side
        cost_price = ROOTS[root].tick_size + CFG.fee_per_contract / ROOTS[root].multiplier
        assert td.meta["cost_log_return"][i] == pytest.approx(cost_price / level, rel=0.05)
    y1 = td.splits["train"].targets[:, 0]
    assert td.target_scale == pytest.approx(float(np.nanstd(y1)), rel=1e-6)
    td.save(tmp_path / "ds")
    back = TrainingData.load(tmp_path / "ds")
    assert back.meta["feature_hash"] == td.meta["feature_hash"]
    np.testing.assert_array_equal(back.splits["test"].observed, td.splits["test"].observed)


def test_a_split_that_would_be_empty_names_the_available_dates():
    f = feats().with_columns(_d=trade_date_expr())
    two_days = f.filter(pl.col("_d") <= date(2024, 3, 5)).drop("_d")
    with pytest.raises(
        DatasetError, match=r"would be empty.*2 trade dates available: 2024-03-04 .. 2024-03-05"
    ):
        build_training_dataset(two_days, CFG)


def test_embargo_below_lookback_plus_horizon_is_rejected():
    with pytest.raises(DatasetError, match="embargo"):
        DatasetConfig(embargo_bars=10)
    with pytest.raises(DatasetError, match="fractions"):
        DatasetConfig(fractions=(0.8, 0.3, 0.1))


def test_a_partial_last_session_does_not_become_an_empty_test_split():
    """Regression: a data set ending one hour into a session (a UTC-day file boundary) once
    left the test split with only that hour, emptied by the embargo."""
    full = make_continuous(days=7, roots=("ES",), roll_after_day=None, session_fraction=0.3,
                           start=date(2024, 3, 4))
    last_date = full.select(trade_date_expr().max()).item()
    ends = full.with_columns(_d=trade_date_expr())
    partial = ends.filter(pl.col("_d") < last_date)
    tail = ends.filter(pl.col("_d") == last_date).group_by("root", maintain_order=True).head(30).select(ends.columns)
    frame = pl.concat([partial, tail]).drop("_d").sort("root", "ts_event")
    td = build_training_dataset(build_features(frame), CFG, close_prices=frame)
    assert td.splits["test"].n_windows > 0
    test_dates = td.meta["splits"]["test"]
    assert test_dates["first_date"] < str(last_date)


def test_a_lazy_shuffled_multi_root_input_gives_the_same_dataset_as_the_sorted_frame():
    """The asset hands a lazy scan of the date-partitioned table (read one root at a time);
    row order must not matter, and several roots keep their (root, ts_event) order."""
    two = feats()
    eager = build_training_dataset(two.sort("root", "ts_event"), CFG)
    lazy = build_training_dataset(two.sample(fraction=1.0, shuffle=True, seed=3).lazy(), CFG)
    assert eager.meta["roots"] == lazy.meta["roots"] == ["ES", "ZN"]
    assert eager.meta["splits"] == lazy.meta["splits"]
    for name, split in eager.splits.items():
        for field in ("observed", "known", "static", "targets", "ts_event", "segment", "root_index",
                      "window_starts"):
            assert np.array_equal(getattr(split, field), getattr(lazy.splits[name], field), equal_nan=True), (
                name, field)


def test_a_dataset_streamed_to_disk_equals_the_in_memory_one_and_is_mapped_back(tmp_path):
    """The asset builds into its run's scratch folder: the wide arrays are written block by
    block (never whole in memory) and the result is memory-mapped from the files."""
    from foxhunt_pipeline.features import dataset as ds
    from foxhunt_pipeline.features.finite import nonfinite_columns

    feats_nan = feats().with_columns(
        pl.when(pl.int_range(pl.len()) % 97 == 0).then(float("nan")).otherwise(pl.col("f_ret_1b"))
        .alias("f_ret_1b"))
    ref = build_training_dataset(feats_nan, CFG, close_prices=bars())
    old_chunk, ds.CHUNK_ROWS = ds.CHUNK_ROWS, 1000  # many blocks per split
    try:
        got = build_training_dataset(feats_nan.lazy(), CFG, close_prices=bars(), out_dir=tmp_path / "ds")
    finally:
        ds.CHUNK_ROWS = old_chunk
    assert isinstance(got.splits["train"].observed, np.memmap)
    for name, split in ref.splits.items():
        for field in ("observed", "known", "static", "targets", "ts_event", "segment", "root_index",
                      "window_starts"):
            assert np.array_equal(getattr(split, field), getattr(got.splits[name], field), equal_nan=True)
    assert got.meta["nonfinite"] == ref.meta["nonfinite"] == nonfinite_columns(ref)
    assert ref.meta["nonfinite"]["train.f_ret_1b"] > 0
    stored = got.save(tmp_path / "stored")
    assert np.array_equal(TrainingData.load(stored).splits["test"].observed, ref.splits["test"].observed,
                          equal_nan=True)


def test_the_npy_writer_takes_rows_in_order_only(tmp_path):
    from models.windows import NpyWriter

    w = NpyWriter(tmp_path / "a.npy", rows=4, cols=2)
    w[slice(0, 2)] = np.ones((2, 2))
    with pytest.raises(ValueError, match="in order"):
        w[slice(3, 4)] = np.ones((1, 2))
    w[slice(2, 4)] = np.zeros((2, 2))
    w.close()
    assert np.load(tmp_path / "a.npy").tolist() == [[1, 1], [1, 1], [0, 0], [0, 0]]


def test_reading_a_date_at_a_time_keeps_the_embargo_across_dates(monkeypatch):
    """The lazy path reads CHUNK_DATES trade dates of a root at a time; an embargo longer
    than a date (200 bars; the fixture keeps the first 30% of each session, so the rest of it
    is a hole and each date holds 414 - 250 warm-up = 164 rows) must still drop the same rows."""
    from foxhunt_pipeline.features import dataset as ds

    cfg = DatasetConfig(lookback=60, horizon=5, embargo_bars=200, fractions=(0.5, 0.25, 0.25))
    eager = build_training_dataset(feats(), cfg)
    monkeypatch.setattr(ds, "CHUNK_DATES", 1)
    lazy = build_training_dataset(feats().lazy(), cfg)
    assert eager.meta["splits"] == lazy.meta["splits"]
    assert eager.meta["splits"]["validation"]["first_date"] == "2024-03-12"  # its first date embargoed whole
    for name, split in eager.splits.items():
        for field in ("observed", "targets", "ts_event", "segment", "window_starts"):
            assert np.array_equal(getattr(split, field), getattr(lazy.splits[name], field), equal_nan=True)
