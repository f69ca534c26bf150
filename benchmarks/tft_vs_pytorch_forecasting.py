"""Our TFT against pytorch-forecasting's, same configuration, side by side, as ratios.

Configuration (the old system's end-to-end test): hidden 64, 4 heads, 2 LSTM layers,
dropout 0.1, T=60, H=5, 241 observed + 10 known + 5 static real inputs, 9 quantiles;
pytorch-forecasting with ``hidden_continuous_size=8`` (its default, our ``var_width``).

    nice python benchmarks/tft_vs_pytorch_forecasting.py [--calls 200] [--threads 1]

Timings on CPU are CPU seconds of this process (``time.process_time``), not wall time:
on a shared box, other tenants' load would otherwise dominate either side's figures
(the batch-1 wall-clock median is reported too). On CUDA they are wall time after
``torch.cuda.synchronize``.

Measures: parameters; batch-1 forward latency median / P95 / P99 over ``--calls``
calls after warm-up; forward throughput at batch 32 and 256; one batch-32 training
step (forward, quantile loss, backward, AdamW step) time; peak memory growth of the
first such step, each side in a fresh subprocess (RSS sampled every millisecond from
``/proc/self/statm`` on CPU; ``torch.cuda.max_memory_allocated`` on CUDA). Threads
default to 1: on a shared box, oversubscribed intra-op threads make pytorch-forecasting
30x slower and the comparison meaningless. pytorch-forecasting is a benchmark-only
dependency; without it the script reports our side alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

S, F, K, T, H = 5, 241, 10, 60, 5
QUANTILES = [round(0.1 * i, 1) for i in range(1, 10)]


def pf_available() -> bool:
    try:
        import pytorch_forecasting  # noqa: F401
    except Exception:  # ImportError, or a broken install
        return False
    return True


# --- the two sides -----------------------------------------------------------


class Side:
    """A model plus closures that run it on a batch of a given size."""

    name: str
    model: torch.nn.Module

    def inputs(self, batch: int, device: torch.device) -> Any: ...
    def forward(self, x: Any) -> torch.Tensor: ...


class OurTFT(Side):
    name = "foxhunt TFT"

    def __init__(self, device: torch.device):
        from models.tft.model import TemporalFusionTransformer, TFTConfig

        cfg = TFTConfig(n_static=S, n_observed=F, n_known=K, lookback=T, horizon=H,
                        hidden=64, heads=4, lstm_layers=2, dropout=0.1)
        self.model = TemporalFusionTransformer(cfg).to(device)

    def inputs(self, batch: int, device: torch.device) -> Any:
        g = torch.Generator().manual_seed(batch)
        return tuple(t.to(device) for t in (torch.randn(batch, S, generator=g),
                                            torch.randn(batch, T, F, generator=g),
                                            torch.randn(batch, T + H, K, generator=g)))

    def forward(self, x: Any) -> torch.Tensor:
        return self.model(*x)


class PytorchForecastingTFT(Side):
    name = "pytorch-forecasting TFT"

    def __init__(self, device: torch.device):
        warnings.filterwarnings("ignore")
        from pytorch_forecasting import TemporalFusionTransformer
        from pytorch_forecasting.data.encoders import TorchNormalizer
        from pytorch_forecasting.metrics import QuantileLoss

        self.static = [f"s{i}" for i in range(S)]
        self.observed = [f"o{i}" for i in range(F)]
        self.known = [f"k{i}" for i in range(K)]
        self.model = TemporalFusionTransformer(
            hidden_size=64, lstm_layers=2, dropout=0.1, output_size=len(QUANTILES),
            loss=QuantileLoss(QUANTILES), attention_head_size=4, max_encoder_length=T,
            static_reals=self.static, time_varying_reals_encoder=self.observed + self.known,
            time_varying_reals_decoder=self.known, x_reals=self.static + self.observed + self.known,
            hidden_continuous_size=8,
            output_transformer=TorchNormalizer(method="identity", center=False),
        ).to(device)

    def inputs(self, batch: int, device: torch.device) -> Any:
        g = torch.Generator().manual_seed(batch)
        n = S + F + K
        x = {
            "encoder_cat": torch.zeros(batch, T, 0, dtype=torch.long),
            "decoder_cat": torch.zeros(batch, H, 0, dtype=torch.long),
            "encoder_cont": torch.randn(batch, T, n, generator=g),
            "decoder_cont": torch.randn(batch, H, n, generator=g),
            "encoder_lengths": torch.full((batch,), T, dtype=torch.long),
            "decoder_lengths": torch.full((batch,), H, dtype=torch.long),
            "target_scale": torch.tensor([[0.0, 1.0]] * batch),
        }
        return {k: v.to(device) for k, v in x.items()}

    def forward(self, x: Any) -> torch.Tensor:
        return self.model(x)["prediction"]


SIDES: dict[str, Callable[[torch.device], Side]] = {
    "tft": OurTFT, "pf": PytorchForecastingTFT}


# --- measurements ------------------------------------------------------------


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _clock(device: torch.device) -> Callable[[], float]:
    return time.perf_counter if device.type == "cuda" else time.process_time


def _forward_timer(side: Side, device: torch.device, batch: int) -> Callable[[], float]:
    side.model.eval()
    x = side.inputs(batch, device)
    clock = _clock(device)

    def once() -> float:
        with torch.inference_mode():
            _sync(device)
            start = clock()
            side.forward(x)
            _sync(device)
            return clock() - start

    return once


def _train_step(side: Side, x: Any, target: torch.Tensor, opt: torch.optim.Optimizer,
                q: torch.Tensor) -> None:
    from models.quantile import pinball_loss

    opt.zero_grad(set_to_none=True)
    pinball_loss(side.forward(x), target, q).backward()
    opt.step()


def _train_timer(side: Side, device: torch.device) -> Callable[[], float]:
    x, target = side.inputs(32, device), torch.randn(32, H, device=device)
    q = torch.tensor(QUANTILES, device=device)
    opt = torch.optim.AdamW(side.model.parameters(), lr=1e-3)
    clock = _clock(device)

    def once() -> float:
        side.model.train()
        _sync(device)
        start = clock()
        _train_step(side, x, target, opt, q)
        _sync(device)
        return clock() - start

    return once


def interleaved(timers: dict[str, Callable[[], float]], calls: int, warmup: int
                ) -> dict[str, np.ndarray]:
    """Alternate the sides call by call, so a noisy neighbour hits both alike."""
    out: dict[str, list[float]] = {k: [] for k in timers}
    for i in range(warmup + calls):
        for key, once in timers.items():
            elapsed = once()
            if i >= warmup:
                out[key].append(elapsed)
    return {k: np.asarray(v) for k, v in out.items()}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_probe(side_key: str, device_name: str, threads: int) -> dict[str, float]:
    """Peak memory growth of the first batch-32 training step (run in a fresh process)."""
    torch.set_num_threads(threads)
    device = torch.device(device_name)
    side = SIDES[side_key](device)
    side.model.train()
    x, target = side.inputs(32, device), torch.randn(32, H, device=device)
    q = torch.tensor(QUANTILES, device=device)
    opt = torch.optim.AdamW(side.model.parameters(), lr=1e-3)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        _train_step(side, x, target, opt, q)
        torch.cuda.synchronize(device)
        return {"peak_growth_mb": (torch.cuda.max_memory_allocated(device) - base) / 2**20}
    base = _rss_bytes()
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss_bytes())
            time.sleep(0.001)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _train_step(side, x, target, opt, q)
    done.set()
    sampler.join()
    peak[0] = max(peak[0], _rss_bytes())
    return {"peak_growth_mb": (peak[0] - base) / 2**20}


def memory_in_subprocess(side_key: str, device: torch.device, threads: int) -> float:
    cmd = [sys.executable, __file__, "--memory-probe", side_key, "--device", str(device),
           "--threads", str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_growth_mb"]


def measure(keys: list[str], device: torch.device, args: argparse.Namespace
            ) -> dict[str, dict[str, Any]]:
    sides = {}
    for key in keys:
        torch.manual_seed(0)
        sides[key] = SIDES[key](device)
    results: dict[str, dict[str, Any]] = {
        k: {"name": s.name, "parameters": int(sum(p.numel() for p in s.model.parameters()))}
        for k, s in sides.items()}
    walls = interleaved({k: _forward_timer(s, device, 1) for k, s in sides.items()}
                        if device.type == "cuda" else
                        {k: _wall(_forward_timer(s, device, 1)) for k, s in sides.items()},
                        args.calls // 4, 2)
    lat = interleaved({k: _forward_timer(s, device, 1) for k, s in sides.items()}, args.calls, 10)
    for k, ms in lat.items():
        ms = ms * 1e3
        results[k]["batch1"] = {
            "median_ms": float(np.median(ms)), "p95_ms": float(np.percentile(ms, 95)),
            "p99_ms": float(np.percentile(ms, 99)), "calls": args.calls,
            "wall_median_ms": float(np.median(walls[k]) * 1e3)}
    for batch, calls in ((32, 5), (256, 3)):
        t = interleaved({k: _forward_timer(s, device, batch) for k, s in sides.items()}, calls, 1)
        for k, sec in t.items():
            results[k][f"throughput_b{batch}"] = batch / float(np.median(sec))
    t = interleaved({k: _train_timer(s, device) for k, s in sides.items()}, 3, 1)
    for k, sec in t.items():
        results[k]["train_step_b32_s"] = float(np.median(sec))
    for k in sides:
        results[k]["train_peak_growth_mb"] = memory_in_subprocess(k, device, args.threads)
        print(json.dumps(results[k]), file=sys.stderr, flush=True)
    return results


def _wall(once: Callable[[], float]) -> Callable[[], float]:
    def timed() -> float:
        start = time.perf_counter()
        once()
        return time.perf_counter() - start

    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="batch-1 calls after warm-up")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--skip-pf", action="store_true")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--memory-probe", choices=sorted(SIDES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    torch.set_num_threads(args.threads)
    if args.memory_probe:
        print(json.dumps(memory_probe(args.memory_probe, args.device, args.threads)))
        return
    device = torch.device(args.device)
    keys = ["tft"]
    if args.skip_pf:
        print("pytorch-forecasting side skipped (--skip-pf)")
    elif not pf_available():
        print("pytorch-forecasting is not installed: reporting our side only. Install the "
              "benchmark-only dependency with: pip install --no-deps pytorch-forecasting==1.8.0 "
              "lightning==2.6.6 lightning-utilities==0.15.3 pytorch-lightning==2.6.6 "
              "scikit-base==1.0.2 torchmetrics==1.9.0")
    else:
        keys.append("pf")
    results = measure(keys, device, args)
    ours, theirs = results["tft"], results.get("pf")
    _report(ours, theirs, device, args)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"ours": ours, "pytorch_forecasting": theirs, "device": str(device),
                       "threads": args.threads}, fh, indent=2)


def _report(ours: dict, theirs: dict | None, device: torch.device, args) -> None:
    clock = "wall time" if device.type == "cuda" else "CPU time of the process"
    print(f"\nTFT benchmark on {device}, {args.threads} thread(s), torch {torch.__version__}, "
          f"timings in {clock}")
    rows = [
        ("parameters", "parameters", "{:,.0f}", None),
        ("batch-1 median ms", ("batch1", "median_ms"), "{:.2f}", "lower"),
        ("batch-1 P95 ms", ("batch1", "p95_ms"), "{:.2f}", "lower"),
        ("batch-1 P99 ms", ("batch1", "p99_ms"), "{:.2f}", "lower"),
        ("batch-1 wall median ms", ("batch1", "wall_median_ms"), "{:.2f}", "lower"),
        ("throughput b32 /s", "throughput_b32", "{:,.0f}", "higher"),
        ("throughput b256 /s", "throughput_b256", "{:,.0f}", "higher"),
        ("train step b32 s", "train_step_b32_s", "{:.3f}", "lower"),
        ("train peak growth MB", "train_peak_growth_mb", "{:,.1f}", "lower"),
    ]
    print(f"{'metric':<22}{'ours':>14}{'pytorch-fc':>14}{'advantage':>12}")
    for label, key, fmt, better in rows:
        a = _get(ours, key)
        b = _get(theirs, key) if theirs else None
        ratio = ""
        if b is not None and better == "lower":
            ratio = f"{b / a:.1f}x"
        elif b is not None and better == "higher":
            ratio = f"{a / b:.1f}x"
        elif b is not None:
            ratio = f"{a / b:.2f} of"
        print(f"{label:<22}{fmt.format(a):>14}{fmt.format(b) if b is not None else '-':>14}"
              f"{ratio:>12}")
    if theirs:
        print("targets: >=20x batch-1 latency, >=20x b256 throughput, >=10x train step, "
              "memory growth <= 1/5")


def _get(d: dict | None, key):
    if d is None:
        return None
    if isinstance(key, tuple):
        return d[key[0]][key[1]]
    return d[key]


if __name__ == "__main__":
    main()
