"""Quantization benchmark: every model x precision against its fp32 anchor, side by side.

    nice python benchmarks/quantization.py [--quick] [--hidden N] [--export [--torchscript-only]]
                                           [--json out.json]

For each model (real feature counts: 247 observed, 14 known, 7 static; lookback 60,
horizon 5) and precision: state-dict size ratio (fp32 / variant), accuracy change
(forecasters: relative pinball-loss change on synthetic test windows; agents: greedy
action agreement with fp32), median latency at batch 1 and 32 and its ratio to fp32
(> 1 is slower), and with ``--export`` the artifact format, size and export time, the
on-disk size ratio vs the fp32 artifact ("disk x") and, as the anchor for int8, the same
for dynamic quantization alone (no weight-only storage: "int8 before"). With
CUDA, fp16 / bf16 throughput at batch 256 against fp32 on the GPU too (target >= 1.5x).
Models are freshly initialised (not trained): size and latency do not depend on training;
the accuracy column shows the rounding error only, so re-check it on trained checkpoints.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from typing import Any

import numpy as np
import torch

from models.agents.policy import PolicyNet
from models.export import ExportError, artifact_bytes, export_artifact, load_artifact
from models.mamba2.model import Mamba2Config, Mamba2Forecaster
from models.quantile import pinball_loss
from models.quantization import (
    Variant,
    batch_of,
    compare_variant,
    evaluate_agent_variants,
    evaluate_forecaster_variants,
    latency_ms,
    quantize_int8,
    quantize_variants,
    recommend,
)
from models.tft.model import TemporalFusionTransformer, TFTConfig
from tests.model_data import synthetic_training_data


def _forecasters(n_f: int, n_k: int, n_s: int, hidden: int) -> dict[str, torch.nn.Module]:
    return {
        "tft": TemporalFusionTransformer(TFTConfig(n_static=n_s, n_observed=n_f, n_known=n_k, hidden=hidden)),
        "mamba2": Mamba2Forecaster(Mamba2Config(n_static=n_s, n_observed=n_f, n_known=n_k, hidden=hidden)),
    }


def _agents(obs_channels: int, lookback: int, h: int) -> dict[str, torch.nn.Module]:
    enc = {"lookback": lookback, "n_channels": obs_channels, "kind": "mlp", "hidden": h}
    return {
        "dqn": PolicyNet(enc, [h, h], "relu", algo="dqn"),
        "ppo": PolicyNet({**enc, "kind": "conv"}, [h, h], "tanh", algo="ppo"),
    }


def _export_rows(variants: dict[str, Any], example: tuple[torch.Tensor, ...], rows: list[dict],
                 formats: tuple[str, ...]) -> None:
    with tempfile.TemporaryDirectory() as d:
        for r in rows:
            v = variants[r["precision"]]
            if not isinstance(v, Variant):
                continue
            t0 = time.perf_counter()
            try:
                path = export_artifact(v.module, example, f"{d}/{r['precision']}", metadata={}, formats=formats)
            except ExportError as exc:
                r["artifact_format"] = "FAILED"
                r["export_error"] = str(exc)[:400]
                r["accepted"] = r["precision"] == "fp32"  # not deployable, as in quantization_report
                continue
            finally:
                r["export_s"] = time.perf_counter() - t0
            r["artifact_format"] = load_artifact(path)[1]["format"]
            r["artifact_bytes"] = artifact_bytes(path)
    fp32 = next((r for r in rows if r["precision"] == "fp32" and "artifact_bytes" in r), None)
    for r in rows:
        if fp32 and "artifact_bytes" in r:
            r["disk_ratio"] = fp32["artifact_bytes"] / r["artifact_bytes"]


def _int8_before(model: torch.nn.Module, example: tuple[torch.Tensor, ...], rows: list[dict],
                 formats: tuple[str, ...], metric: Any = None, inputs: Any = None) -> dict[str, Any]:
    """The anchor: dynamic int8 alone (what int8 was before weight-only storage)."""
    module = quantize_int8(model, example, weight_only=False)
    out: dict[str, Any] = {"precision": "int8 before"}
    if metric is not None:
        out["metric_rel_change"] = compare_variant(model, module, inputs, metric)["metric_rel_change"]
    with tempfile.TemporaryDirectory() as d:
        path = export_artifact(module, example, f"{d}/m", metadata={}, formats=formats)
        out["artifact_bytes"] = artifact_bytes(path)
    fp32 = next((r for r in rows if r["precision"] == "fp32" and "artifact_bytes" in r), None)
    if fp32:
        out["disk_ratio"] = fp32["artifact_bytes"] / out["artifact_bytes"]
    return out


def _gpu_throughput(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> dict[str, float]:
    variants = quantize_variants(model, batch_of(inputs, 4), precisions=("fp32", "fp16", "bf16"), device="cuda")
    x = tuple(t.cuda() for t in batch_of(inputs, 256))
    out = {}
    for p, v in variants.items():
        if isinstance(v, Variant):
            out[p] = 256 / (latency_ms(v.module, x, repeats=20) / 1e3)
    return {f"{p}_samples_per_s": s for p, s in out.items()} | {
        f"{p}_speedup": s / out["fp32"] for p, s in out.items() if "fp32" in out
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="hidden 32, fewer windows, fewer repeats")
    ap.add_argument("--export", action="store_true", help="also export each variant and time it")
    ap.add_argument("--torchscript-only", action="store_true",
                    help="export fp32 as TorchScript too (same container as int8: the strict ratio)")
    ap.add_argument("--hidden", type=int, help="model width (default 64, --quick 32)")
    ap.add_argument("--json", help="write all rows here")
    args = ap.parse_args()
    formats = ("torchscript",) if args.torchscript_only else ("torch.export", "torchscript")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    n_f, n_k, n_s = (64, 14, 7) if args.quick else (247, 14, 7)
    repeats = 5 if args.quick else 15
    data = synthetic_training_data({"train": 400, "validation": 200, "test": 800}, n_observed=n_f,
                                   n_known=n_k, n_static=n_s)
    ds = data.window_dataset("test")
    idx = np.linspace(0, len(ds) - 1, 64 if args.quick else 256).astype(np.int64)
    batch = ds.batch(idx)
    inputs = (batch["static"], batch["observed"], batch["known"])
    results: dict[str, Any] = {}

    hidden = args.hidden or (32 if args.quick else 64)
    quantiles = data.meta["quantiles"]
    for name, model in _forecasters(n_f, n_k, n_s, hidden).items():
        model.eval()
        variants = quantize_variants(model, batch_of(inputs, 4))
        rows = evaluate_forecaster_variants(variants, inputs, batch["target"], quantiles=data.meta["quantiles"],
                                            latency_repeats=repeats)
        if args.export:
            _export_rows(variants, batch_of(inputs, 4), rows, formats)
            rows.append(_int8_before(model, batch_of(inputs, 4), rows, formats,
                                     lambda out: float(pinball_loss(out.float(), batch["target"], quantiles)), inputs))
        results[name] = {"rows": rows, "recommended": recommend([r for r in rows if "supported" in r])}
        if torch.cuda.is_available():
            results[name]["gpu_b256"] = _gpu_throughput(model, inputs)

    obs = torch.randn(512, 60 * (n_f + n_k) + 3)
    returns = np.random.default_rng(0).normal(0, 1e-3, 512)
    for name, policy in _agents(n_f + n_k, 60, hidden).items():
        policy.eval()
        variants = quantize_variants(policy, (obs[:4],))
        rows = evaluate_agent_variants(variants, (obs,), returns, cost=2e-5, latency_repeats=repeats)
        if args.export:
            _export_rows(variants, (obs[:4],), rows, formats)
            rows.append(_int8_before(policy, (obs[:4],), rows, formats))
        results[name] = {"rows": rows, "recommended": recommend([r for r in rows if "supported" in r])}

    print(f"{'model':7} {'prec':5} {'size x':>7} {'disk x':>7} {'acc':>10} {'b1 ms':>8} {'b1 x':>6} "
          f"{'b32 ms':>8} {'b32 x':>6} {'format':>12} {'export s':>8}")
    for name, res in results.items():
        for r in res["rows"]:
            if r["precision"] == "int8 before":
                acc = f"{r['metric_rel_change']:+.2%}" if "metric_rel_change" in r else "-"
                print(f"{name:7} {'int8 before (dynamic only)':>13} {r.get('disk_ratio', float('nan')):7.2f} "
                      f"{acc:>10}")
                continue
            if not r["supported"]:
                print(f"{name:7} {r['precision']:5} {r['reason']}")
                continue
            acc = (f"{r['action_agreement']:.1%} agr" if "action_agreement" in r
                   else f"{r['metric_rel_change']:+.2%}")
            print(f"{name:7} {r['precision']:5} {r['size_ratio']:7.2f} {r.get('disk_ratio', float('nan')):7.2f} "
                  f"{acc:>10} {r['latency_ms_b1']:8.2f} "
                  f"{r['latency_ratio_b1']:6.2f} {r['latency_ms_b32']:8.2f} {r['latency_ratio_b32']:6.2f} "
                  f"{r.get('artifact_format', '-'):>12} {r.get('export_s', float('nan')):8.1f}")
        print(f"{name:7} -> {res['recommended'][0]}: {res['recommended'][1]}")
        for r in res["rows"]:
            if "export_error" in r:
                print(f"{name:7} {r['precision']} export failed: {r['export_error']}")
        if "gpu_b256" in res:
            print(f"{name:7} GPU batch 256: {res['gpu_b256']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2, default=str)


if __name__ == "__main__":
    main()
