"""Wall time of data-parallel training against one process, side by side.

    nice python benchmarks/ddp_scaling.py [--rows 6000] [--steps 60] [--batch 128] [--repeats 3]

Runs the same job (same global batch, same steps) through the production path
(``torchrun`` + ``assets.ddp_worker``) with 1 and 2 ranks, each rank on one
thread, plus the in-process harness (``train_forecaster``) with 1 and 2 threads as the
anchor. Reports each run's training seconds (inside the loop) and wall seconds (launch,
imports, rendezvous included) and the ratios to the 1-process anchor. The runs are
interleaved ``--repeats`` times and the medians reported, since a shared box is noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from assets.common.distributed_training import torchrun_command
from models.registry import build_model
from models.training.ddp_protocol import model_config_for
from models.training.loop import TrainConfig, train_forecaster
from tests.model_data import synthetic_training_data

PARAMS = {"hidden": 32, "heads": 4, "lstm_layers": 1, "var_width": 4, "dropout": 0.0}


def _torchrun(nproc: int, dataset: Path, out: Path, train: dict) -> tuple[float, float]:
    out.mkdir(parents=True)
    spec = out / "spec.json"
    spec.write_text(json.dumps({"family": "tft", "model_params": PARAMS, "train_params": train,
                                "dataset_path": str(dataset), "out_dir": str(out),
                                "device": "cpu"}))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    subprocess.run(torchrun_command(nproc, spec), check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    return json.loads((out / "result.json").read_text())["training_seconds"], wall


def _in_process(data, train: dict, threads: int) -> tuple[float, float]:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    start = time.perf_counter()
    model = build_model("tft", model_config_for("tft", data, PARAMS))
    result = train_forecaster(model, data, TrainConfig.from_dict(train))
    return result.training_seconds, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=6000)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    data = synthetic_training_data({"train": args.rows, "validation": 600})
    train = {"epochs": 1, "batch_size": args.batch, "max_batches_per_epoch": args.steps,
             "max_val_batches": 1, "patience": None, "num_threads": 1}
    load_before = os.getloadavg()[0]
    samples: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        dataset = data.save(Path(tmp) / "dataset")
        for rep in range(args.repeats):
            runs = {
                "in-process, 1 thread (anchor)": lambda: _in_process(data, train, 1),
                "in-process, 2 threads": lambda: _in_process(data, {**train, "num_threads": 2}, 2),
                "torchrun, 1 rank x 1 thread":
                    lambda: _torchrun(1, dataset, Path(tmp) / f"r1-{rep}", train),  # noqa: B023
                "torchrun, 2 ranks x 1 thread (DDP gloo)":
                    lambda: _torchrun(2, dataset, Path(tmp) / f"r2-{rep}", train),  # noqa: B023
            }
            for name, run in runs.items():
                samples.setdefault(name, []).append(run())
    medians = {name: (statistics.median(t for t, _ in s), statistics.median(w for _, w in s))
               for name, s in samples.items()}
    anchor_train = next(iter(medians.values()))[0]
    print(f"TFT hidden {PARAMS['hidden']}, global batch {args.batch}, {args.steps} steps, "
          f"{os.cpu_count()} CPUs, load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}, "
          f"median of {args.repeats}")
    print(f"{'run':44s} {'train s':>8s} {'wall s':>8s} {'train/anchor':>13s}")
    for name, (train_s, wall_s) in medians.items():
        print(f"{name:44s} {train_s:8.2f} {wall_s:8.2f} {train_s / anchor_train:13.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
