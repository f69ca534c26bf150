"""Would two steps side by side finish the demo sooner? The demo TFT's training throughput on
this machine: one process with every core's thread (what a step does now) against two
1-thread processes at once (what a multiprocess executor with one step per core would do).

The demo profile's TFT (hidden 32, 1 LSTM layer, variable width 2, batch 64; the demo
dataset's shapes: 247 observed variables, 60 bars of lookback, 5 of horizon) trained on
fixed random batches for ``--seconds`` after a common start, so both sides of a pair really
overlap (a first version timed 20 steps each and let one side's import overlap the other's
training: it reported a 1.7x gain that two real CLI runs did not show).

    python benchmarks/step_parallelism.py [--seconds 20]

Prints ms per step of each side and the throughput ratio (pair / one process). Nothing is
asserted: above ~1.3 side-by-side steps would pay for their extra processes and memory.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

SHAPES = {"n_static": 7, "n_observed": 247, "n_known": 14, "lookback": 60, "horizon": 5}
QUANTILES = [0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95]
BATCH = 64


def worker(threads: int, start: float, seconds: float) -> None:
    """Train the demo TFT on fixed random batches from ``start`` for ``seconds``; print the
    ms per step."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from models.registry import build_model
    from models.training.loop import pinball_loss

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = build_model("tft", {"hidden": 32, "lstm_layers": 1, "var_width": 2,
                                "quantiles": QUANTILES, **SHAPES})
    opt = torch.optim.AdamW(model.parameters(), 2e-3)
    q = torch.tensor(QUANTILES)
    batches = [(torch.randn(BATCH, SHAPES["n_static"]),
                torch.randn(BATCH, SHAPES["lookback"], SHAPES["n_observed"]),
                torch.randn(BATCH, SHAPES["lookback"] + SHAPES["horizon"], SHAPES["n_known"]),
                torch.randn(BATCH, SHAPES["horizon"])) for _ in range(8)]

    def step(i: int) -> None:
        static, observed, known, target = batches[i % len(batches)]
        loss = pinball_loss(model(static, observed, known), target, q)
        opt.zero_grad()
        loss.backward()
        opt.step()

    for i in range(5):  # warm-up: first steps allocate
        step(i)
    while time.time() < start:
        time.sleep(0.01)
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        step(n)
        n += 1
    print(f"{1000 * (time.perf_counter() - t0) / n:.1f}", flush=True)


def run(threads: list[int], seconds: float) -> list[float]:
    """ms per step of one process per entry of ``threads``, all training at once."""
    start = time.time() + 20  # every process imported torch and warmed up by then
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(t), "--start", str(start),
                               "--seconds", str(seconds)], stdout=subprocess.PIPE, text=True)
             for t in threads]
    return [float(p.communicate()[0].strip().splitlines()[-1]) for p in procs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--start", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.start, args.seconds)
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    (one,) = run([cores], args.seconds)
    (single,) = run([1], args.seconds)
    pair = run([1] * cores, args.seconds)
    print(f"{cores} cores; demo TFT training step, batch {BATCH}")
    print(f"  one process, {cores} threads: {one:7.1f} ms/step")
    print(f"  one process, 1 thread:  {single:7.1f} ms/step ({single / one:.2f}x the {cores}-thread step)")
    print(f"  {cores} processes of 1 thread at once: "
          + ", ".join(f"{ms:.1f}" for ms in pair) + " ms/step")
    ratio = sum(1 / ms for ms in pair) / (1 / one)
    print(f"  throughput side by side / one process: {ratio:.2f}x")


if __name__ == "__main__":
    main()
