"""Combination weights on the simplex from validation predictions, and the ensemble as a
forecaster that checkpoints and reloads like the single models."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.ensemble.model import build_ensemble
from models.ensemble.weights import fit_quantile_weights
from models.quantile import pinball_loss
from models.registry import build_model
from models.training.checkpoint import load_checkpoint, save_checkpoint
from tests.model_data import synthetic_training_data

Q = (0.1, 0.5, 0.9)
Z = np.array([-1.2815516, 0.0, 1.2815516])


def _forecast(mean: np.ndarray, sd: float) -> np.ndarray:
    return mean[..., None] + sd * Z


def test_two_independent_noisy_forecasts_combine_better_than_either():
    rng = np.random.default_rng(0)
    signal = rng.normal(size=(4000, 2))
    y = signal + 0.3 * rng.normal(size=signal.shape)
    a = signal + 0.5 * rng.normal(size=signal.shape)
    b = signal + 0.5 * rng.normal(size=signal.shape)
    fitted = fit_quantile_weights({"a": _forecast(a, 0.6), "b": _forecast(b, 0.6)}, y, Q)
    assert sum(fitted.weights.values()) == pytest.approx(1.0)
    assert 0.3 < fitted.weights["a"] < 0.7
    assert fitted.loss < min(fitted.member_losses.values()) - 0.01


def test_a_useless_member_gets_almost_no_weight_and_the_fit_is_never_worse_than_the_best_member():
    rng = np.random.default_rng(1)
    y = rng.normal(size=(3000, 3))
    good = _forecast(y + 0.1 * rng.normal(size=y.shape), 0.15)
    noise = _forecast(rng.normal(size=y.shape) * 3, 0.1)
    clim = np.quantile(y, Q, axis=0).T  # [H, Q], broadcast like the climatology member
    fitted = fit_quantile_weights({"good": good, "noise": noise, "climatology": clim}, y, Q)
    assert fitted.weights["noise"] < 0.01 < fitted.weights["good"]
    assert fitted.loss <= fitted.member_losses["good"] + 1e-12
    w = fitted.weights
    combined = good * w["good"] + noise * w["noise"] + clim * w["climatology"]
    assert fitted.loss == pytest.approx(pinball_loss(combined, y, Q))


def test_bad_members_are_refused():
    with pytest.raises(ValueError, match="no ensemble members"):
        fit_quantile_weights({}, np.zeros((3, 1)), Q)
    with pytest.raises(ValueError, match=r"\['b'\]"):
        fit_quantile_weights({"a": np.zeros((3, 1, 3)), "b": np.full((3, 1, 3), np.nan)}, np.zeros((3, 1)), Q)


def test_the_ensemble_is_the_weighted_average_and_survives_a_checkpoint(tmp_path):
    data = synthetic_training_data({"train": 200, "validation": 80, "test": 80}, lookback=16)
    base = {"n_static": len(data.static_names), "n_observed": len(data.observed_names),
            "n_known": len(data.known_names), "lookback": data.lookback, "horizon": data.horizon,
            "quantiles": list(data.meta["quantiles"])}
    torch.manual_seed(0)
    tft = build_model("tft", {**base, "hidden": 8, "heads": 2, "lstm_layers": 1, "var_width": 2}).eval()
    mamba = build_model("mamba2", {**base, "hidden": 8, "n_layers": 1}).eval()
    clim = np.linspace(-1, 1, data.horizon * len(base["quantiles"])).reshape(data.horizon, -1)
    weights = {"tft": 0.5, "mamba2": 0.3, "climatology": 0.2}
    ens = build_ensemble(["tft", "mamba2", "climatology"], weights, {"tft": tft, "mamba2": mamba},
                         horizon=data.horizon, quantiles=base["quantiles"], climatology=clim)
    batch = data.window_dataset("test").batch(np.arange(8))
    args = (batch["static"], batch["observed"], batch["known"])
    with torch.no_grad():
        want = 0.5 * tft(*args) + 0.3 * mamba(*args) + 0.2 * torch.tensor(clim, dtype=torch.float32)
        torch.testing.assert_close(ens(*args), want)
        path = save_checkpoint(tmp_path / "ens", ens, model_type="ensemble", config=ens.config.to_dict())
        loaded, meta = load_checkpoint(path)
        torch.testing.assert_close(loaded(*args), want)
    assert meta["model_type"] == "ensemble"
    only_tft = build_ensemble(["tft", "mamba2"], {"tft": 1.0, "mamba2": 0.0}, {"tft": tft, "mamba2": mamba},
                              horizon=data.horizon, quantiles=base["quantiles"])
    assert len(only_tft.members) == 1 and only_tft.config.names == ["tft"]


def test_combined_quantiles_keep_every_window_when_only_the_climatology_is_weighted():
    from models.ensemble.weights import combine_quantiles

    member = np.zeros((7, 2, 3))
    clim = np.arange(6, dtype=float).reshape(2, 3)
    out = combine_quantiles({"tft": member, "climatology": clim}, {"tft": 0.0, "climatology": 1.0})
    assert out.shape == (7, 2, 3) and np.array_equal(out[4], clim)
