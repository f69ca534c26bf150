"""A TFT of several members (a deep ensemble): what it forecasts, how it trains, what it
saves, exports and quantizes."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch
import torch.ao.nn.quantized.dynamic as qd

from models.export import export_artifact, load_artifact
from models.quantization.variants import quantize_variants
from models.registry import build_model
from models.tft.model import TemporalFusionTransformer, TFTConfig
from models.training.checkpoint import load_checkpoint, save_checkpoint
from models.training.loop import (
    TrainConfig,
    predict_quantiles,
    quantile_loss_of,
    scaled_targets,
    train_forecaster,
)
from tests.model_data import synthetic_training_data
from tests.models.tft.test_tft import SMALL, _inputs

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _members(m: int = 2) -> TemporalFusionTransformer:
    torch.manual_seed(0)
    return TemporalFusionTransformer(TFTConfig(**SMALL, members=m))


def test_forecast_is_the_mean_of_members_that_differ():
    model = _members(3).eval()
    x = _inputs(model.config, 7)
    with torch.no_grad():
        each = [m(*x) for m in model.members]
        out = model(*x)
    assert len(model.members) == 3 and out.shape == (7, 5, 9)
    assert not torch.allclose(each[0], each[1], atol=1e-3)  # own initial weights
    assert torch.allclose(out, torch.stack(each).mean(dim=0), atol=1e-6)
    assert (out.diff(dim=-1) >= 0).all()  # a mean of non-crossing quantiles does not cross


def test_first_member_starts_where_a_single_tft_of_the_same_seed_does():
    torch.manual_seed(0)
    single = TemporalFusionTransformer(TFTConfig(**SMALL))
    member = _members().members[0]
    for (name, a), b in zip(single.state_dict().items(), member.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def _data():
    return synthetic_training_data(n_rows={"train": 600, "validation": 200}, n_observed=4,
                                   n_known=3, n_static=2, lookback=12, signal=0.5, seed=0)


def _config(data, members: int = 1) -> TFTConfig:
    return TFTConfig(n_static=2, n_observed=4, n_known=3, lookback=12, horizon=data.horizon,
                     hidden=16, heads=2, lstm_layers=1, members=members)


def test_members_train_apart_each_as_one_tft_with_its_own_seed(tmp_path):
    """Member ``i`` ends exactly as one TFT from the same initial weights trained with seed
    ``seed + i``: its own batches, dropout and early stopping, nothing of the others."""
    data = _data()
    cfg = TrainConfig(epochs=3, batch_size=32, lr=5e-3, num_threads=1, seed=3,
                      max_batches_per_epoch=8)
    torch.manual_seed(0)
    ensemble = TemporalFusionTransformer(_config(data, members=2))
    start = [copy.deepcopy(m.state_dict()) for m in ensemble.members]
    rows: list[dict] = []
    result = train_forecaster(ensemble, data, cfg, on_epoch_end=rows.append,
                              checkpoint_dir=tmp_path / "state")
    for i, member in enumerate(ensemble.members):
        alone = TemporalFusionTransformer(_config(data))
        alone.load_state_dict(start[i])
        train_forecaster(alone, data, replace(cfg, seed=3 + i))
        for (name, a), b in zip(alone.state_dict().items(), member.state_dict().values(),
                                strict=True):
            assert torch.equal(a, b), (i, name)
        assert (tmp_path / "state" / f"member-{i}").is_dir()
    assert [(r["member"], r["epoch"]) for r in rows] == \
        [(m, e) for m in (0, 1) for e in (1, 2, 3)]
    assert result.history == rows and result.epochs_run == 6
    assert not torch.equal(start[0]["head.proj.weight"], start[1]["head.proj.weight"])


def test_interpretation_is_the_members_mean():
    model = _members().eval()
    x = _inputs(model.config, 4)
    with torch.no_grad():
        out, info = model.forward_with_interpretation(*x)
        runs = [m.forward_with_interpretation(*x) for m in model.members]
        assert torch.allclose(out, model(*x), atol=1e-5)
    for key in ("static_weights", "past_weights", "future_weights", "attention"):
        assert torch.allclose(info[key], (runs[0][1][key] + runs[1][1][key]) / 2, atol=1e-6)
    assert torch.allclose(info["past_weights"].sum(-1), torch.ones(4, 12), atol=1e-5)


def test_config_checks_members_and_old_configs_are_single():
    with pytest.raises(ValueError, match="members"):
        TFTConfig(**SMALL, members=0)
    old = TFTConfig(**SMALL).to_dict()
    del old["members"]  # a checkpoint saved before the field
    model = build_model("tft", old)
    assert model.config.members == 1 and not hasattr(model, "members")


def test_checkpoint_round_trip_keeps_every_member(tmp_path):
    model = _members().eval()
    path = save_checkpoint(tmp_path / "tft", model, model_type="tft", config=model.config.to_dict())
    loaded = load_checkpoint(path)[0].eval()
    x = _inputs(model.config, 5)
    with torch.no_grad():
        assert torch.equal(loaded(*x), model(*x))
    assert loaded.config.members == 2


def test_training_validates_and_keeps_the_average():
    data = _data()
    torch.manual_seed(0)
    model = TemporalFusionTransformer(_config(data, members=2))
    result = train_forecaster(model, data, TrainConfig(epochs=3, batch_size=64, lr=5e-3,
                                                       num_threads=1, seed=0))
    val = data.window_dataset("validation")
    preds = predict_quantiles(model, val, batch_size=256)
    assert preds.shape == (len(val), data.horizon, 9)
    # early stopping chose, and restored, the weights whose average validated best
    assert quantile_loss_of(preds, scaled_targets(val), model.config.quantiles) == \
        pytest.approx(result.best_val_loss, rel=1e-4)
    each = [predict_quantiles(m, val, batch_size=256) for m in model.members]
    assert abs(each[0] - each[1]).max() > 1e-3
    assert abs((each[0] + each[1]) / 2 - preds).max() < 1e-5


def test_export_and_int8_reproduce_the_average(tmp_path):
    model = _members().eval()
    x = _inputs(model.config, 4)
    path = export_artifact(model, x, tmp_path / "tft", metadata={"model": "tft", "precision": "fp32"})
    fn, _ = load_artifact(path)
    y = _inputs(model.config, 9, seed=1)
    with torch.no_grad():
        assert torch.allclose(fn(*y), model(*y), atol=1e-5)
    int8 = quantize_variants(model, x)["int8"].module
    kinds = {type(m) for m in int8.modules() if isinstance(m, (qd.Linear, qd.LSTM))}
    assert kinds == {qd.Linear, qd.LSTM}  # in every member
    assert sum(isinstance(m, qd.LSTM) for m in int8.modules()) == 2 * 2  # encoder, decoder each
    with torch.inference_mode():
        ref = model(*y)
        assert float((int8(*y) - ref).abs().max() / ref.abs().max()) < 0.05
