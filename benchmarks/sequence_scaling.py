"""Forward latency against history length: Mamba-2 next to the TFT (the anchor).

    nice python benchmarks/sequence_scaling.py [--lengths 60 240 960 3840] [--batches 1 32]
        [--threads 1] [--budget 2.0] [--one-segment] [--json out.json]

Both models at the shipped sizes (hidden 64, 2 layers; TFT 4 heads, 2 LSTM layers) on
inputs in the training-dataset format (5 static, 12 observed, 10 known, horizon 5),
fp32, ``torch.inference_mode``. Each (batch, length) cell times the two models in
alternation, so a busy machine slows both alike. The reported figure is the best (min)
of the calls' *thread CPU time*: what the forward itself consumed, since on a shared
machine wall time also counts waiting for a core, and the minimum is the least
disturbed call (as ``timeit`` advises). The median wall time is printed next to it.

Targets (issue 5): Mamba-2's cost grows linearly, T=3840 costing <= 77x T=60 (64x
the steps, 20% slack), and Mamba-2 at T=60 is no slower than the TFT.
``--one-segment`` adds Mamba-2 with ``segment_tokens=0`` (one parallel scan over the
whole input) to show what the segmented scan buys on CPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch

from models.mamba2.model import Mamba2Config, Mamba2Forecaster

N_STATIC, N_OBSERVED, N_KNOWN, HORIZON = 5, 12, 10, 5
LINEAR_SLACK = 77 / 64  # the 77x for 64x the steps


def build_models(one_segment: bool) -> dict[str, torch.nn.Module]:
    sizes = dict(n_static=N_STATIC, n_observed=N_OBSERVED, n_known=N_KNOWN, horizon=HORIZON)
    torch.manual_seed(0)
    models: dict[str, torch.nn.Module] = {
        "mamba2": Mamba2Forecaster(Mamba2Config(**sizes, hidden=64, n_layers=2)),
    }
    if one_segment:
        models["mamba2_1seg"] = Mamba2Forecaster(
            Mamba2Config(**sizes, hidden=64, n_layers=2, segment_tokens=0))
    try:
        from models.tft.model import TemporalFusionTransformer, TFTConfig
    except ImportError as exc:
        print(f"TFT skipped: models.tft.model is not importable ({exc})")
    else:
        models["tft"] = TemporalFusionTransformer(
            TFTConfig(**sizes, hidden=64, heads=4, lstm_layers=2))
    return {name: m.eval() for name, m in models.items()}


def inputs(batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(batch * 100_003 + length)
    return (torch.randn(batch, N_STATIC, generator=g),
            torch.randn(batch, length, N_OBSERVED, generator=g),
            torch.randn(batch, length + HORIZON, N_KNOWN, generator=g))


def time_cell(models: dict[str, torch.nn.Module], batch: int, length: int, budget_s: float
              ) -> dict[str, dict[str, float]]:
    """Best thread-CPU and median wall milliseconds per forward, models interleaved."""
    x = inputs(batch, length)
    calls: dict[str, Callable[[], torch.Tensor]] = {
        name: (lambda m=m: m(*x)) for name, m in models.items()
    }
    cpu: dict[str, list[float]] = {n: [] for n in calls}
    wall: dict[str, list[float]] = {n: [] for n in calls}
    with torch.inference_mode():
        first = {}
        for name, call in calls.items():  # warm-up, and a size for the repeat count
            t0 = time.perf_counter()
            call()
            first[name] = time.perf_counter() - t0
        repeats = int(min(50, max(3, budget_s / max(sum(first.values()), 1e-6))))
        for _ in range(repeats):
            for name, call in calls.items():
                c0, w0 = time.thread_time(), time.perf_counter()
                call()
                cpu[name].append(time.thread_time() - c0)
                wall[name].append(time.perf_counter() - w0)
    return {n: {"cpu_ms": 1e3 * min(cpu[n]), "cpu_median_ms": 1e3 * statistics.median(cpu[n]),
                "wall_ms": 1e3 * statistics.median(wall[n]), "repeats": repeats} for n in calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[60, 240, 960, 3840])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--budget", type=float, default=2.0,
                        help="seconds of timing per cell (at least 3 calls each)")
    parser.add_argument("--one-segment", action="store_true")
    parser.add_argument("--json", type=str, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    models = build_models(args.one_segment)
    names = list(models)
    base_len = args.lengths[0]
    results: dict[str, dict] = {}

    head = f"{'batch':>5} {'T':>5} " + " ".join(f"{n + ' ms':>14}" for n in names)
    head += " " + " ".join(f"{n + ' xT0':>14}" for n in names)
    if "tft" in models:
        head += f" {'mamba2/tft':>10}"
    print(f"torch {torch.__version__}, {args.threads} thread(s); ms = best thread CPU time "
          f"(median wall in brackets); xT0 = cost / cost at T={base_len}")
    print(head)
    for batch in args.batches:
        base: dict[str, float] = {}
        for length in args.lengths:
            cell = time_cell(models, batch, length, args.budget)
            results[f"b{batch}_t{length}"] = cell
            if length == base_len:
                base = {n: cell[n]["cpu_ms"] for n in names}
            row = f"{batch:>5} {length:>5} "
            row += " ".join(f"{cell[n]['cpu_ms']:>7.2f} ({cell[n]['wall_ms']:>5.1f})"
                            for n in names)
            row += " " + " ".join(f"{cell[n]['cpu_ms'] / base[n]:>13.1f}x" for n in names)
            if "tft" in models:
                row += f" {cell['mamba2']['cpu_ms'] / cell['tft']['cpu_ms']:>10.2f}"
            print(row, flush=True)

    print()
    last = args.lengths[-1]
    for batch in args.batches:
        growth = (results[f"b{batch}_t{last}"]["mamba2"]["cpu_ms"]
                  / results[f"b{batch}_t{base_len}"]["mamba2"]["cpu_ms"])
        target = LINEAR_SLACK * last / base_len
        line = (f"batch {batch}: Mamba-2 T={last} costs {growth:.1f}x T={base_len} "
                f"({last / base_len:.0f}x the steps; target <= {target:.0f}x): "
                f"{'ok' if growth <= target else 'MISSED'}")
        if "tft" in models:
            tft_growth = (results[f"b{batch}_t{last}"]["tft"]["cpu_ms"]
                          / results[f"b{batch}_t{base_len}"]["tft"]["cpu_ms"])
            ratio = (results[f"b{batch}_t{base_len}"]["mamba2"]["cpu_ms"]
                     / results[f"b{batch}_t{base_len}"]["tft"]["cpu_ms"])
            line += (f"; TFT grows {tft_growth:.1f}x; at T={base_len} Mamba-2/TFT = {ratio:.2f} "
                     f"({'ok' if ratio <= 1 else 'MISSED'})")
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "torch": torch.__version__, "cells": results}, f,
                      indent=2)


if __name__ == "__main__":
    main()
