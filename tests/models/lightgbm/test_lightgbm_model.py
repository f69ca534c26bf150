"""The LightGBM quantile baseline: the forecasters' output contract (rows, order, shape,
units), quantiles that never cross, and a planted signal found (none where none is)."""

from __future__ import annotations

import numpy as np
import pytest

from models.evaluation.evaluate import predict_windows
from models.lightgbm.model import LightGBMQuantiles, fit_lightgbm_quantiles
from models.windows import SplitArrays, TrainingData
from tests.model_data import synthetic_training_data

ROWS = {"train": 2400, "validation": 700, "test": 700}
FAST = dict(fit_quantiles=(0.1, 0.5, 0.9), num_boost_round=60, min_data_in_leaf=50)


def _ic(model: LightGBMQuantiles, data: TrainingData, h: int = 0) -> float:
    test = data.splits["test"]
    pred = model.predict(test)[:, h, model.quantiles.index(0.5)]
    y = test.targets[test.window_starts + data.lookback - 1, h]
    return float(np.corrcoef(pred, y)[0, 1])


@pytest.fixture(scope="module")
def planted() -> tuple[TrainingData, LightGBMQuantiles]:
    data = synthetic_training_data(ROWS, lookback=20, signal=0.5, seed=1)
    return data, fit_lightgbm_quantiles(data, seed=0, **FAST)


def test_predict_matches_predict_windows_row_for_row(planted) -> None:
    data, model = planted
    test = data.splits["test"]
    ours = model.predict(test)
    assert ours.shape == (test.n_windows, data.horizon, len(data.meta["quantiles"]))
    ref = predict_windows("lightgbm", model, data.window_dataset("test"), batch_size=97,
                          expect_shape=(data.horizon, len(data.meta["quantiles"])))
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-6)
    # rows follow window_starts, whatever their order: reversed windows, reversed rows
    rev = SplitArrays(**{**test.__dict__, "window_starts": test.window_starts[::-1].copy()})
    np.testing.assert_allclose(model.predict(rev), ours[::-1], rtol=0, atol=1e-6)


def test_forecasts_are_in_target_scaled_units(planted) -> None:
    """The P10..P90 band of the horizon-1 forecast covers about 80% of targets / target_scale."""
    data, model = planted
    test = data.splits["test"]
    p = model.predict(test)
    y = test.targets[test.window_starts + data.lookback - 1, 0] / data.target_scale
    q = model.quantiles
    inside = (y >= p[:, 0, q.index(0.1)]) & (y <= p[:, 0, q.index(0.9)])
    assert 0.65 < inside.mean() < 0.92, inside.mean()


def test_quantiles_never_cross(planted) -> None:
    data, model = planted
    assert model.fitted_quantiles == [0.1, 0.5, 0.9] and model.quantiles == data.meta["quantiles"]
    p = model.predict(data.splits["test"])
    assert np.all(np.diff(p, axis=2) >= 0)
    assert np.all(p[:, :, -1] > p[:, :, 0])  # a real spread, not one collapsed value


def test_learns_a_planted_signal_and_finds_none_in_noise(planted) -> None:
    data, model = planted
    assert _ic(model, data) > 0.3
    noise = synthetic_training_data(ROWS, lookback=20, signal=0.0, seed=1)
    assert abs(_ic(fit_lightgbm_quantiles(noise, seed=0, **FAST), noise)) < 0.1


def test_all_dataset_quantiles_by_default_and_deterministic_by_seed() -> None:
    data = synthetic_training_data({"train": 900, "validation": 300, "test": 300},
                                   lookback=10, horizon=2, signal=0.5, seed=2)
    kw = dict(seed=3, num_boost_round=15, min_data_in_leaf=40, window_mean=True)
    a, b = fit_lightgbm_quantiles(data, **kw), fit_lightgbm_quantiles(data, **kw)
    assert a.fitted_quantiles == a.quantiles and len(a.boosters) == 2
    assert all(len(row) == 9 for row in a.boosters)
    assert len(a.feature_names) == 2 * 12 + 2 * 10 + 5 and "f_0@mean10" in a.feature_names
    test = data.splits["test"]
    np.testing.assert_array_equal(a.predict(test), b.predict(test))
    ref = predict_windows("lightgbm", a, data.window_dataset("test"), batch_size=64)
    np.testing.assert_allclose(a.predict(test), ref, rtol=0, atol=1e-6)


def test_bad_input_is_named() -> None:
    data = synthetic_training_data({"train": 400, "test": 200}, lookback=10, seed=0)
    with pytest.raises(ValueError, match="no validation windows"):
        fit_lightgbm_quantiles(data)
    full = synthetic_training_data({"train": 400, "validation": 200, "test": 200}, lookback=10)
    with pytest.raises(ValueError, match="fit_quantiles"):
        fit_lightgbm_quantiles(full, fit_quantiles=(0.9, 0.1))


def test_the_artifact_reproduces_the_model_and_loads_as_a_forecaster(planted, tmp_path) -> None:
    """Saved as boosters' text in the forecasters' artifact layout (no pickle), loaded by
    ``models.export.load_artifact`` like a torch forecaster: the same numbers, torch out."""
    from models.export import forecaster_metadata, load_artifact
    from models.lightgbm import LightGBMConfig, save_lightgbm

    data, model = planted
    meta = {**data.meta, "target_scale": data.target_scale}
    cfg = LightGBMConfig(fit_quantiles=(0.1, 0.5, 0.9), num_boost_round=60)
    path = save_lightgbm(model, tmp_path / "model", metadata=forecaster_metadata(
        meta, model="lightgbm", precision="fp32", lightgbm_config=cfg.to_dict()))
    assert sorted(p.name for p in path.iterdir()) == ["boosters.json", "meta.json"]
    fn, loaded_meta = load_artifact(path / "boosters.json")
    assert loaded_meta["format"] == "lightgbm"
    assert loaded_meta["input_names"] == ["static", "observed", "known"]
    assert LightGBMConfig.from_dict(loaded_meta["lightgbm_config"]) == cfg
    ds = data.window_dataset("test")
    b = ds.batch(np.arange(7))
    out = fn(b["static"], b["observed"], b["known"])
    assert out.dtype.is_floating_point and tuple(out.shape) == (7, data.horizon, 9)
    np.testing.assert_allclose(out.numpy(), model.predict(data.splits["test"])[:7],
                               rtol=0, atol=1e-6)


def test_config_round_trips_and_checks() -> None:
    from models.lightgbm import LightGBMConfig

    cfg = LightGBMConfig(seed=3, fit_quantiles=[0.1, 0.5, 0.9], max_train_rows=None,
                         params={"num_leaves": 7})
    assert cfg.fit_quantiles == (0.1, 0.5, 0.9)
    assert LightGBMConfig.from_dict({**cfg.to_dict(), "unknown": 1}) == cfg
    with pytest.raises(ValueError, match="num_boost_round"):
        LightGBMConfig(num_boost_round=0)
