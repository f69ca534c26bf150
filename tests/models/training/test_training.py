import math

import numpy as np
import pytest
import torch

from models.tft.model import TemporalFusionTransformer, TFTConfig
from models.training.checkpoint import load_checkpoint
from models.training.device import select_device
from models.training.loop import (
    TrainConfig,
    TrainingDivergedError,
    climatology_quantiles,
    lr_at,
    predict_quantiles,
    quantile_loss_of,
    scaled_targets,
    train_forecaster,
)
from tests.model_data import synthetic_training_data

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LOOKBACK = 10


@pytest.fixture(scope="module")
def data():
    return synthetic_training_data(n_rows={"train": 600, "validation": 200, "test": 200},
                                   n_observed=4, n_known=3, n_static=2, lookback=LOOKBACK,
                                   segment_length=200, seed=1)


def _model(data, seed=0, **kw):
    torch.manual_seed(seed)
    cfg = TFTConfig(n_static=2, n_observed=4, n_known=3, lookback=LOOKBACK, horizon=5,
                    hidden=8, heads=2, lstm_layers=1, var_width=2, **kw)
    return TemporalFusionTransformer(cfg)


FAST = dict(epochs=3, batch_size=32, max_batches_per_epoch=4, max_val_batches=2,
            eval_batch_size=64, num_threads=1, patience=None)


def test_history_and_result_fields(data, tmp_path):
    seen = []
    result = train_forecaster(_model(data), data, TrainConfig(**FAST), checkpoint_dir=tmp_path,
                              on_epoch_end=seen.append)
    assert result.epochs_run == 3 and len(result.history) == 3 and seen == result.history
    for rec in result.history:
        assert set(rec) >= {"epoch", "train_loss", "val_loss", "grad_norm", "lr", "seconds",
                            "samples_per_s"}
        assert rec["grad_norm"] > 0 and math.isfinite(rec["val_loss"]) and rec["samples_per_s"] > 0
    assert result.best_val_loss == min(r["val_loss"] for r in result.history)
    assert result.n_parameters == sum(p.numel() for p in _model(data).parameters())
    best, meta = load_checkpoint(result.best_checkpoint)
    assert meta["epoch"] == result.best_epoch
    assert meta["observed_names"] == data.observed_names
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "best.json", "best.safetensors", "last.json", "last.safetensors"]


def test_deterministic_with_seed(data):
    runs = [train_forecaster(_model(data), data, TrainConfig(**FAST, seed=7)) for _ in range(2)]
    assert [r["train_loss"] for r in runs[0].history] == [r["train_loss"] for r in runs[1].history]
    other = train_forecaster(_model(data), data, TrainConfig(**FAST, seed=8))
    assert other.history[0]["train_loss"] != runs[0].history[0]["train_loss"]


def test_nan_loss_names_the_step_and_keeps_the_good_checkpoint(data, tmp_path):
    model = _model(data)

    def poison(record):
        if record["epoch"] == 1:
            with torch.no_grad():
                next(model.parameters()).fill_(float("nan"))

    with pytest.raises(TrainingDivergedError, match=r"epoch 2, step 5") as info:
        train_forecaster(model, data, TrainConfig(**FAST), checkpoint_dir=tmp_path,
                         on_epoch_end=poison)
    assert info.value.step == 5 and info.value.epoch == 2
    good = info.value.last_good_checkpoint
    assert good == tmp_path / "last.safetensors"
    restored, meta = load_checkpoint(good)
    assert meta["epoch"] == 1
    assert all(torch.isfinite(p).all() for p in restored.parameters())
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


def test_resume_continues_exactly(data, tmp_path):
    cfg = TrainConfig(**{**FAST, "epochs": 4})
    straight = train_forecaster(_model(data), data, cfg)

    class Stop(Exception):
        pass

    def stop_after_two(record):
        if record["epoch"] == 2:
            raise Stop

    with pytest.raises(Stop):
        train_forecaster(_model(data), data, cfg, checkpoint_dir=tmp_path,
                         on_epoch_end=stop_after_two)
    resumed = train_forecaster(_model(data, seed=99), data, cfg, checkpoint_dir=tmp_path,
                               resume=True)
    assert [r["epoch"] for r in resumed.history] == [1, 2, 3, 4]
    assert [r["train_loss"] for r in resumed.history] == [
        r["train_loss"] for r in straight.history]
    assert resumed.best_val_loss == straight.best_val_loss


def test_resume_refuses_a_different_model(data, tmp_path):
    train_forecaster(_model(data), data, TrainConfig(**{**FAST, "epochs": 1}),
                     checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match="cannot resume"):
        train_forecaster(_model(data, dropout=0.2), data, TrainConfig(**FAST),
                         checkpoint_dir=tmp_path, resume=True)


def test_early_stopping_with_progress_bar(data, capsys):
    cfg = TrainConfig(**{**FAST, "epochs": 30, "patience": 1, "lr": 1e-6, "min_delta": 1.0})
    result = train_forecaster(_model(data), data, cfg, progress=True)
    assert result.stopped_early and result.epochs_run == 2
    assert "batch" in capsys.readouterr().err  # tqdm drew a bar
    train_forecaster(_model(data), data, TrainConfig(**{**FAST, "epochs": 1}))
    assert capsys.readouterr().err == ""  # and stays silent by default


def test_schedules():
    cfg = TrainConfig(lr=1e-2, schedule="cosine", warmup_fraction=0.1)
    lrs = [lr_at(s, 100, cfg) for s in range(100)]
    assert lrs[0] < lrs[9] == pytest.approx(1e-2)
    assert lrs[-1] == pytest.approx(1e-2 * cfg.min_lr_fraction)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:], strict=False))
    one = [lr_at(s, 100, TrainConfig(lr=1e-2, schedule="onecycle")) for s in range(100)]
    assert max(one) == pytest.approx(1e-2, rel=0.05) and one[0] < 1e-3 and one[-1] < 1e-3
    assert lr_at(50, 100, TrainConfig(lr=3e-3, schedule="constant")) == 3e-3
    with pytest.raises(ValueError, match="schedule"):
        TrainConfig(schedule="step")
    assert TrainConfig.from_dict(TrainConfig(betas=(0.8, 0.9)).to_dict()).betas == (0.8, 0.9)


def test_predictions_and_climatology(data):
    model = _model(data)
    val = data.window_dataset("validation")
    preds = predict_quantiles(model, val, batch_size=64)
    assert preds.shape == (len(val), 5, 9) and preds.dtype == np.float32
    assert (np.diff(preds, axis=-1) >= 0).all()
    clim = climatology_quantiles(data)
    assert clim.shape == (5, 9) and (np.diff(clim, axis=-1) >= 0).all()
    train_targets = scaled_targets(data.window_dataset("train"))
    assert clim[0, 4] == pytest.approx(np.median(train_targets[:, 0]), rel=1e-5)
    # the numpy loss of the model's predictions equals the harness' torch validation loss
    from models.training.loop import evaluate_loss

    torch_loss = evaluate_loss(model, val, torch.tensor(model.config.quantiles), 64)
    assert quantile_loss_of(preds, scaled_targets(val), model.config.quantiles) == pytest.approx(
        torch_loss, rel=1e-5)


def test_select_device_cpu():
    choice = select_device("cpu")
    assert choice.device == torch.device("cpu") and choice.autocast_dtype is None
    assert not choice.pin_memory
    auto = select_device()
    assert auto.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="device"):
        select_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            select_device("cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_train_on_cuda_with_autocast(data, tmp_path):
    choice = select_device("cuda")
    assert choice.autocast_dtype in (torch.bfloat16, torch.float16) and choice.pin_memory
    result = train_forecaster(_model(data), data, TrainConfig(**FAST), device=choice.device,
                              autocast_dtype=choice.autocast_dtype, checkpoint_dir=tmp_path)
    assert all(math.isfinite(r["val_loss"]) for r in result.history)
    model, _ = load_checkpoint(result.best_checkpoint, device=choice.device)
    assert next(model.parameters()).device.type == "cuda"
    # forecasts on the GPU (the eval fast path) equal the CPU's from the same checkpoint
    val = data.window_dataset("validation")
    on_gpu = predict_quantiles(model, val, batch_size=64, device=choice.device)
    on_cpu = predict_quantiles(load_checkpoint(result.best_checkpoint)[0], val, batch_size=64)
    np.testing.assert_allclose(on_gpu, on_cpu, rtol=1e-3, atol=1e-3)


def test_validation_on_a_fixed_sample_then_the_whole_split_once(data):
    """Epochs score the same sample of validation windows (early stopping compares like with
    like, at a cost that does not grow with the history); the final model is scored on the
    whole split once. A sample as large as the split changes nothing."""
    from models.training.loop import evaluate_loss, validation_sample

    val = data.window_dataset("validation")
    a, b = validation_sample(val, 50), validation_sample(val, 50)
    assert len(a) == 50 and np.array_equal(a.split.window_starts, b.split.window_starts)
    assert np.all(np.diff(a.split.window_starts) > 0)
    assert set(a.split.window_starts) <= set(val.split.window_starts)
    assert validation_sample(val, len(val)) is val and validation_sample(val, None) is val
    cfg = {**FAST, "max_val_batches": None}
    model = _model(data)
    sampled = train_forecaster(model, data, TrainConfig(**cfg, val_windows=50))
    q = torch.tensor(model.config.quantiles)
    assert sampled.full_val_loss == pytest.approx(evaluate_loss(model, val, q, 64))
    # the model ends with its best epoch's weights: their loss on the sample is the best
    assert evaluate_loss(model, a, q, 64) == pytest.approx(sampled.best_val_loss)
    whole = train_forecaster(_model(data), data, TrainConfig(**cfg))
    same = train_forecaster(_model(data), data, TrainConfig(**cfg, val_windows=len(val)))
    assert whole.full_val_loss is None and same.full_val_loss is None
    assert [r["val_loss"] for r in same.history] == [r["val_loss"] for r in whole.history]
