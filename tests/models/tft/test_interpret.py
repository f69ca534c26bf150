"""The TFT's mean variable-selection weights and attention, averaged over a split."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.evaluation.interpretation_plots import attention_by_horizon, variable_importance
from models.registry import build_model
from models.tft.interpret import interpret
from tests.model_data import synthetic_training_data

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tft_and_data():
    data = synthetic_training_data({"train": 300, "validation": 200}, n_observed=5, n_known=3, n_static=2,
                                   lookback=10, horizon=3, segment_length=100)
    torch.manual_seed(0)
    model = build_model("tft", {"n_static": 2, "n_observed": 5, "n_known": 3, "lookback": 10, "horizon": 3,
                                "quantiles": [0.1, 0.5, 0.9], "hidden": 8, "heads": 2, "lstm_layers": 1,
                                "dropout": 0.0, "var_width": 2})
    return model, data


def test_weights_are_named_distributions_and_attention_is_causal(tft_and_data):
    model, data = tft_and_data
    info = interpret(model, data, split="validation", max_windows=64, batch_size=16)
    assert list(info.encoder) == [*data.observed_names, *data.known_names]
    assert list(info.static) == data.static_names and list(info.decoder) == data.known_names
    for group in (info.static, info.encoder, info.decoder):
        assert sum(group.values()) == pytest.approx(1.0, abs=1e-4)
    assert info.attention.shape == (3, 13)
    np.testing.assert_allclose(info.attention.sum(axis=1), 1.0, atol=1e-4)
    # horizon 1 (query at position T) may not attend to later decoder steps
    assert info.attention[0, 11:].max() < 1e-6
    assert info.top("encoder", 2)[0][1] >= info.top("encoder", 2)[1][1]
    assert {r["group"] for r in info.rows()} == {"static", "encoder", "decoder"}


def test_mean_matches_a_single_full_batch(tft_and_data):
    """Batched averaging is the mean over all windows, not a mean of batch means."""
    model, data = tft_and_data
    a = interpret(model, data, split="validation", max_windows=37, batch_size=5)
    b = interpret(model, data, split="validation", max_windows=37, batch_size=64)
    np.testing.assert_allclose(a.attention, b.attention, atol=1e-6)
    assert a.encoder == pytest.approx(b.encoder, abs=1e-6)


def test_plots_are_written(tft_and_data, tmp_path):
    model, data = tft_and_data
    info = interpret(model, data, split="validation", max_windows=16)
    p1 = variable_importance(tmp_path / "imp.png", {g: info.top(g) for g in ("static", "encoder", "decoder")})
    p2 = attention_by_horizon(tmp_path / "att.png", info.attention, info.lookback)
    for p in (p1, p2):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 2000
