"""Does the TFT learn? Learning curves on one walk-forward fold of generated data (issue 23).

One fold of ``generate(days=20, roots=("ES", "ZN"), seed)`` through the real data path, the
demo profile's TFT (hidden 32, batch 64, 60 batches an epoch), trained for each ``--epochs``
with the training loop the assets use. Per epoch: train and validation pinball, the test
pinball, the information coefficient of the median forecast at horizons 1 and 5, and the
spread (sd over windows) of the median forecast beside the target's. Side by side:

* ``reference init``: the model as it is (``models.tft.init``: Keras's initialisation);
* ``torch default init``: the same model with PyTorch's layer defaults, as it was built
  before (``reference_init`` skipped), which is what did not learn;
* ``pytorch-forecasting``: its ``TemporalFusionTransformer`` on the same windows, the same
  loop (AdamW, warm-up + cosine, clip 1.0, the same batches), ``hidden_continuous_size`` =
  our ``var_width``; it is a benchmark-only dependency run through ``--pf-python`` (a Python
  with ``pytorch-forecasting`` 1.8 installed, e.g. a separate venv, since it pins pandas
  below ours); without it, that side is skipped;
* LightGBM (the demo profile's baseline) and the climatology on the same test windows.

    nice python benchmarks/tft_learning.py [--seed 7] [--fold 1] [--epochs 4,12]
        [--lr 0.002] [--pf-python /tmp/pfvenv/bin/python] [--pf-epochs 4]

Prints one table per side and epoch count. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from models.quantile import pinball_loss  # noqa: E402
from models.windows import TrainingData  # noqa: E402

Q_MEDIAN = 4  # index of 0.5 in the nine default quantiles


def scaled_targets(data: TrainingData, split: str) -> np.ndarray:
    ds = data.window_dataset(split)
    return ds.batch(np.arange(len(ds)))["target"].numpy().astype(np.float64)


def curve_point(epoch: int, train_loss: float, pred_val: np.ndarray, pred_test: np.ndarray,
                data: TrainingData, seconds: float) -> dict[str, float]:
    q = data.meta["quantiles"]
    y_val, y_test = scaled_targets(data, "validation"), scaled_targets(data, "test")
    med = pred_test[:, :, Q_MEDIAN]
    return {"epoch": epoch, "train": train_loss, "val": pinball_loss(pred_val, y_val, q),
            "test": pinball_loss(pred_test, y_test, q),
            "ic1": float(np.corrcoef(med[:, 0], y_test[:, 0])[0, 1]),
            "ic5": float(np.corrcoef(med[:, -1], y_test[:, -1])[0, 1]),
            "med_sd1": float(med[:, 0].std()), "med_sd5": float(med[:, -1].std()),
            "y_sd5": float(y_test[:, -1].std()), "seconds": seconds}


# --- our TFT ------------------------------------------------------------------------------


def our_curve(data: TrainingData, epochs: int, lr: float, weight_decay: float,
              default_init: bool) -> list[dict[str, float]]:
    import models.tft.model as tft_model
    from models.registry import build_model, dataset_model_config
    from models.training.loop import TrainConfig, predict_quantiles, train_forecaster

    torch.manual_seed(0)
    config = {**dataset_model_config("tft", data.meta), "hidden": 32}
    init = tft_model.reference_init
    if default_init:
        tft_model.reference_init = lambda model: None  # the model as it was built before
    try:
        model = build_model("tft", config)
    finally:
        tft_model.reference_init = init
    points: list[dict[str, float]] = []
    started = [time.perf_counter()]

    def on_epoch(record: dict[str, float]) -> None:
        seconds = time.perf_counter() - started[0]
        points.append(curve_point(int(record["epoch"]), record["train_loss"],
                                  predict_quantiles(model, data.window_dataset("validation")),
                                  predict_quantiles(model, data.window_dataset("test")), data,
                                  seconds))
        started[0] = time.perf_counter()

    train_forecaster(model, data, TrainConfig(epochs=epochs, max_batches_per_epoch=60,
                                              batch_size=64, lr=lr, weight_decay=weight_decay,
                                              patience=None), on_epoch_end=on_epoch)
    return points


# --- pytorch-forecasting's TFT (run in the --pf-python interpreter) -------------------------


def pf_curve(data: TrainingData, epochs: int, lr: float, weight_decay: float
             ) -> list[dict[str, float]]:
    warnings.filterwarnings("ignore")
    from pytorch_forecasting import TemporalFusionTransformer
    from pytorch_forecasting.data.encoders import TorchNormalizer
    from pytorch_forecasting.metrics import QuantileLoss

    from models.training.loop import TrainConfig, lr_at

    torch.manual_seed(0)
    q = list(data.meta["quantiles"])
    s, f, k = len(data.static_names), len(data.observed_names), len(data.known_names)
    static, observed, known = ([f"{p}{i}" for i in range(n)] for p, n in
                               (("s", s), ("o", f), ("k", k)))
    model = TemporalFusionTransformer(
        hidden_size=32, lstm_layers=2, dropout=0.1, output_size=len(q), loss=QuantileLoss(q),
        attention_head_size=4, max_encoder_length=data.lookback, static_reals=static,
        time_varying_reals_encoder=observed + known, time_varying_reals_decoder=known,
        x_reals=static + observed + known, hidden_continuous_size=4,
        output_transformer=TorchNormalizer(method="identity", center=False))
    t, h = data.lookback, data.horizon
    qt = torch.tensor(q)

    def inputs(b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        n = b["static"].shape[0]
        st = b["static"].unsqueeze(1)
        return {"encoder_cat": torch.zeros(n, t, 0, dtype=torch.long),
                "decoder_cat": torch.zeros(n, h, 0, dtype=torch.long),
                "encoder_cont": torch.cat([st.expand(n, t, s), b["observed"], b["known"][:, :t]], -1),
                "decoder_cont": torch.cat([st.expand(n, h, s), torch.zeros(n, h, f),
                                           b["known"][:, t:]], -1),
                "encoder_lengths": torch.full((n,), t), "decoder_lengths": torch.full((n,), h),
                "target_scale": torch.tensor([[0.0, 1.0]] * n)}

    @torch.no_grad()
    def predict(split: str) -> np.ndarray:
        model.eval()
        ds = data.window_dataset(split)
        out = [model(inputs(ds.batch(np.arange(i, min(i + 512, len(ds))))))["prediction"]
               for i in range(0, len(ds), 512)]
        model.train()
        return torch.cat(out).numpy()

    config = TrainConfig(epochs=epochs, max_batches_per_epoch=60, batch_size=64, lr=lr,
                         weight_decay=weight_decay)
    train = data.window_dataset("train")
    total = epochs * 60
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    step, points = 0, []
    for epoch in range(1, epochs + 1):
        started = time.perf_counter()
        order = np.random.default_rng([0, epoch]).permutation(len(train))
        losses = []
        for j in range(60):
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, total, config)
            b = train.batch(order[j * 64:(j + 1) * 64])
            pred = model(inputs(b))["prediction"]
            diff = b["target"].unsqueeze(-1) - pred
            loss = torch.maximum(qt * diff, (qt - 1) * diff).mean()
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            step += 1
            losses.append(loss.item())
        points.append(curve_point(epoch, float(np.mean(losses)), predict("validation"),
                                  predict("test"), data, time.perf_counter() - started))
    return points


# --- references and the report ------------------------------------------------------------


def references(data: TrainingData) -> dict[str, dict[str, float]]:
    from foxhunt_pipeline.config.profiles import PROFILES
    from models.climatology import climatology_quantiles
    from models.lightgbm.model import fit_lightgbm_quantiles

    q = data.meta["quantiles"]
    y = scaled_targets(data, "test")
    lgb = fit_lightgbm_quantiles(data, seed=0, **PROFILES["demo"]["lightgbm"]).predict(
        data.splits["test"])
    clim = climatology_quantiles(data, list(q))
    return {"lightgbm": {"test": pinball_loss(lgb, y, q),
                         "ic1": float(np.corrcoef(lgb[:, 0, Q_MEDIAN], y[:, 0])[0, 1]),
                         "ic5": float(np.corrcoef(lgb[:, -1, Q_MEDIAN], y[:, -1])[0, 1])},
            "climatology": {"test": pinball_loss(clim, y, q)}}


def _fmt(v: float | None, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if v is None or not math.isfinite(v) else f"{v:{width}.{digits}f}"


def report(name: str, points: list[dict[str, float]]) -> str:
    head = (f"{'epoch':>5} {'train':>7} {'val':>7} {'test':>7} {'ic_h1':>6} {'ic_h5':>6} "
            f"{'med_sd_h1':>9} {'med_sd_h5':>9} {'y_sd_h5':>7} {'s':>5}")
    lines = [f"-- {name}", head]
    for p in points:
        lines.append(" ".join([f"{p['epoch']:5d}", _fmt(p["train"], 7, 4), _fmt(p["val"], 7, 4),
                               _fmt(p["test"], 7, 4), _fmt(p["ic1"], 6, 3), _fmt(p["ic5"], 6, 3),
                               _fmt(p["med_sd1"], 9, 3), _fmt(p["med_sd5"], 9, 3),
                               _fmt(p["y_sd5"], 7, 3), _fmt(p["seconds"], 5, 1)]))
    return "\n".join(lines)


def fold_dataset(seed: int, fold: int, directory: Path) -> TrainingData:
    from foxhunt_pipeline.config.profiles import PROFILES
    from models.evaluation.row_pool import fold_data
    from models.evaluation.walk_forward import WalkForwardConfig, plan_folds
    from tests.walk_forward_data import generated_pool

    pool = generated_pool(directory / "data", days=20, roots=("ES", "ZN"), seed=seed)
    config = WalkForwardConfig(**PROFILES["demo"]["walk_forward"])
    data = fold_data(pool, plan_folds(pool.dates, config)[fold - 1], config)
    data.save(directory / "fold")
    return TrainingData.load(directory / "fold")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--fold", type=int, default=1)
    ap.add_argument("--epochs", default="4,12")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--pf-python", default=None, help="a Python with pytorch-forecasting")
    ap.add_argument("--pf-epochs", default=None, help="epochs for its side (default: --epochs; "
                    "it runs ~15x slower than ours on a CPU)")
    ap.add_argument("--pf-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(1)
    epochs = [int(e) for e in args.epochs.split(",")]
    if args.pf_child:  # the pytorch-forecasting side, in its own interpreter
        data = TrainingData.load(args.pf_child)
        for n in epochs:
            print(json.dumps({"epochs": n, "points": pf_curve(data, n, args.lr,
                                                              args.weight_decay)}), flush=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        data = fold_dataset(args.seed, args.fold, Path(tmp))
        print(f"seed {args.seed}, fold {args.fold}: {len(data.window_dataset('train'))} train, "
              f"{len(data.window_dataset('validation'))} validation, "
              f"{len(data.window_dataset('test'))} test windows; {len(data.observed_names)} "
              f"observed features; lr {args.lr}, weight decay {args.weight_decay}")
        refs = references(data)
        print("references on the test windows: " + "; ".join(
            f"{k} pinball {v['test']:.4f}" + (f", ic_h1 {v['ic1']:.3f}, ic_h5 {v['ic5']:.3f}"
                                              if "ic1" in v else "") for k, v in refs.items()))
        sides: list[tuple[str, Callable[[int], list[dict[str, float]]]]] = [
            ("foxhunt TFT, reference init",
             lambda n: our_curve(data, n, args.lr, args.weight_decay, default_init=False)),
            ("foxhunt TFT, torch default init (before)",
             lambda n: our_curve(data, n, args.lr, args.weight_decay, default_init=True)),
        ]
        for n in epochs:
            for name, run in sides:
                print(report(f"{name}, {n} epochs", run(n)), flush=True)
        if args.pf_python:
            out = subprocess.run([args.pf_python, __file__, "--pf-child", str(Path(tmp) / "fold"),
                                  "--epochs", args.pf_epochs or args.epochs, "--lr", str(args.lr),
                                  "--weight-decay", str(args.weight_decay)],
                                 capture_output=True, text=True, env={"PYTHONPATH": str(ROOT),
                                                                      "PATH": "/usr/bin:/bin"})
            if out.returncode:
                print(f"pytorch-forecasting side failed:\n{out.stderr[-2000:]}")
            for line in out.stdout.splitlines():
                got = json.loads(line)
                print(report(f"pytorch-forecasting TFT, {got['epochs']} epochs", got["points"]))
        else:
            print("(no --pf-python: the pytorch-forecasting side is skipped)")


if __name__ == "__main__":
    main()
