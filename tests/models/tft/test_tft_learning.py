"""It learns (LEGACY failure 2: the loss sat at 0.896557 for 10 epochs)."""

import numpy as np
import pytest
import torch

from models.tft.model import TemporalFusionTransformer, TFTConfig
from models.training.loop import (
    TrainConfig,
    climatology_quantiles,
    predict_quantiles,
    quantile_loss_of,
    scaled_targets,
    train_forecaster,
)
from models.windows import TrainingData
from tests.model_data import synthetic_training_data

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _tft(data: TrainingData, **kw) -> TemporalFusionTransformer:
    torch.manual_seed(0)
    cfg = TFTConfig(n_static=len(data.static_names), n_observed=len(data.observed_names),
                    n_known=len(data.known_names), lookback=data.lookback,
                    horizon=data.horizon, **kw)
    return TemporalFusionTransformer(cfg)


@pytest.mark.slow
def test_overfits_one_small_batch():
    lookback = 8
    data = synthetic_training_data(n_rows={"train": lookback + 5 + 7}, n_observed=3,
                                   n_known=2, n_static=2, lookback=lookback, seed=3)
    data.splits["validation"] = data.splits["train"]  # judge the fit on the batch itself
    assert data.splits["train"].n_windows == 8
    model = _tft(data, hidden=32, heads=2, lstm_layers=1, var_width=4, dropout=0.0)
    cfg = TrainConfig(epochs=150, batch_size=8, lr=5e-3, weight_decay=0.0, schedule="constant",
                      grad_clip=None, patience=None, num_threads=1)
    result = train_forecaster(model, data, cfg)
    first, best = result.history[0]["val_loss"], result.best_val_loss
    assert best < 0.1 * first, (first, best)
    assert best < 0.05, best


@pytest.mark.slow
def test_beats_climatology_on_learnable_data():
    data = synthetic_training_data(n_rows={"train": 3000, "validation": 800, "test": 800},
                                   n_observed=4, n_known=3, n_static=2, lookback=12,
                                   signal=0.5, seed=0)
    model = _tft(data, hidden=16, heads=2, lstm_layers=1, var_width=4, dropout=0.0)
    cfg = TrainConfig(epochs=8, batch_size=64, lr=5e-3, patience=2, num_threads=1, seed=0)
    result = train_forecaster(model, data, cfg)
    val = data.window_dataset("validation")
    targets = scaled_targets(val)
    clim = quantile_loss_of(climatology_quantiles(data), targets, model.config.quantiles)
    preds = predict_quantiles(model, val, batch_size=512)
    model_loss = quantile_loss_of(preds, targets, model.config.quantiles)
    assert model_loss == pytest.approx(result.best_val_loss, rel=1e-4)
    assert model_loss < 0.97 * clim, (model_loss, clim)
    # the gain comes where the signal is: horizon 1
    h1_model = quantile_loss_of(preds[:, :1], targets[:, :1], model.config.quantiles)
    h1_clim = quantile_loss_of(climatology_quantiles(data)[:1], targets[:, :1],
                               model.config.quantiles)
    assert h1_model < 0.92 * h1_clim
    assert np.isfinite(preds).all()
