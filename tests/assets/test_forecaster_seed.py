"""A forecaster asset's initial weights come from its training config's seed, not from the
process's random torch seed (the production model was not reproducible across runs)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import assets.common.forecaster_training as training
from models.registry import build_model, seeded_model
from models.training.loop import TrainConfig

CONFIG = {"n_static": 1, "n_observed": 3, "n_known": 1, "lookback": 8, "horizon": 2,
          "quantiles": [0.1, 0.5, 0.9], "hidden": 8}


class _Stop(Exception):
    pass


def _initial_weights(monkeypatch, tmp_path, seed: int) -> dict[str, torch.Tensor]:
    seen = {}

    def trainer(model, *args, **kwargs):
        seen.update({k: v.clone() for k, v in model.state_dict().items()})
        raise _Stop

    monkeypatch.setattr(training, "train_forecaster", trainer)
    fit = training._Fit(family="tft", model_params={}, model_config=CONFIG,
                        train_cfg=TrainConfig(seed=seed), nproc_per_node=1,
                        choice=SimpleNamespace(device="cpu", autocast_dtype=None))
    torch.seed()  # a random process-wide state before each call, as in a fresh process
    with pytest.raises(_Stop):
        training._fit_forecaster(None, fit, None, None, tmp_path, lambda row: None, None)
    return seen


def test_the_same_seed_gives_the_same_initial_weights(monkeypatch, tmp_path):
    a, b = _initial_weights(monkeypatch, tmp_path, 3), _initial_weights(monkeypatch, tmp_path, 3)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    c = _initial_weights(monkeypatch, tmp_path, 4)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_seeded_model_is_the_fold_models_initialisation():
    torch.manual_seed(11)
    expected = build_model("mamba2", CONFIG).state_dict()
    got = seeded_model("mamba2", CONFIG, 11).state_dict()
    assert all(torch.equal(expected[k], got[k]) for k in expected)
