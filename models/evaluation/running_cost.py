"""What a model costs to run: latency, throughput, peak memory, size.

Latency is timed per call at batch 1 (``perf_counter``, CUDA synchronised before reading
the clock), after warm-up. Throughput is samples/s over back-to-back calls at larger
batches. Peak memory is attributed to the measured calls only: on CUDA the allocator's
peak since a reset; on CPU the growth of the process's peak RSS (``VmHWM``) over the RSS
before the calls, with the high-water mark reset through ``/proc/self/clear_refs``. Some
kernels and sandboxes refuse or ignore that reset, and then the earlier peak of the process
would hide the calls' growth; there a background thread samples ``VmRSS`` instead.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import resource
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch


def _sync(device: str | torch.device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _call(fn: Callable[..., Any], inputs: Any) -> Any:
    if isinstance(inputs, Mapping):
        return fn(**inputs)
    if isinstance(inputs, tuple | list):
        return fn(*inputs)
    return fn(inputs)


def _proc_status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    """True only when the kernel really reset the high-water mark to the current RSS."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    hwm, rss = _proc_status_kib("VmHWM"), _proc_status_kib("VmRSS")
    return hwm is not None and rss is not None and hwm - rss <= 4096


class _RssSampler:
    """Highest ``VmRSS`` seen while running: the fallback when the peak cannot be reset."""

    def __init__(self, interval_s: float = 0.0005) -> None:
        self.interval_s = interval_s
        self.peak_kib = _proc_status_kib("VmRSS") or 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            rss = _proc_status_kib("VmRSS")
            if rss is not None and rss > self.peak_kib:
                self.peak_kib = rss

    def __enter__(self) -> _RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        rss = _proc_status_kib("VmRSS")
        if rss is not None and rss > self.peak_kib:
            self.peak_kib = rss


def _peak_rss_kib() -> int:
    hwm = _proc_status_kib("VmHWM")
    if hwm is not None:
        return hwm
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # KiB on Linux


def measure_running_cost(
    fn: Callable[..., Any],
    make_inputs: Callable[[int], Any],
    *,
    device: str | torch.device = "cpu",
    calls: int = 200,
    throughput_calls: int | None = None,
    warmup: int = 10,
    throughput_batch_sizes: Iterable[int] = (32, 256),
    throughput_seconds: float = 1.0,
    model: torch.nn.Module | None = None,
    checkpoint_path: str | os.PathLike[str] | None = None,
) -> dict[str, float]:
    """Time ``fn(make_inputs(b))`` (a mapping is passed as keywords, a tuple positionally).

    Returns latency_ms_{p50,p95,p99,mean} at batch 1, throughput_b{n}_per_s per batch size,
    peak_memory_mb over the measured calls, and n_parameters / checkpoint_mb when ``model``
    or ``checkpoint_path`` is given (without a path, the size of ``torch.save`` of the
    state dict). Each throughput runs ``throughput_calls`` calls or ``throughput_seconds``,
    whichever ends first (at least 3 calls): a rate settles within a second, and 200 calls
    at batch 256 took 20 s of the TFT's evaluation."""
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")
    throughput_calls = calls if throughput_calls is None else throughput_calls
    dev = torch.device(device)
    x1 = make_inputs(1)
    memory = _PeakMemory(dev)
    with torch.inference_mode(), memory.sampler or contextlib.nullcontext():
        out = _latency(fn, x1, dev, calls, warmup)
        for b in throughput_batch_sizes:
            out[f"throughput_b{b}_per_s"] = _throughput(fn, make_inputs(b), b, dev,
                                                        throughput_calls, warmup,
                                                        throughput_seconds)
    out.update(memory.result())
    out.update(_size(model, checkpoint_path))
    return out


def _latency(fn: Callable[..., Any], x1: Any, dev: torch.device, calls: int, warmup: int
             ) -> dict[str, float]:
    """Mean and p50/p95/p99 of per-call wall time at batch 1, after ``warmup`` calls."""
    for _ in range(warmup):
        _call(fn, x1)
    _sync(dev)
    times = np.empty(calls)
    for i in range(calls):
        t0 = time.perf_counter()
        _call(fn, x1)
        _sync(dev)
        times[i] = time.perf_counter() - t0
    ms = times * 1e3
    out = {"latency_ms_mean": float(ms.mean())}
    for p in (50, 95, 99):
        out[f"latency_ms_p{p}"] = float(np.percentile(ms, p))
    return out


def _throughput(fn: Callable[..., Any], xb: Any, b: int, dev: torch.device, calls: int,
                warmup: int, seconds: float = math.inf) -> float:
    """Samples per second over back-to-back calls at batch ``b``: ``calls`` of them, or as
    many as ``seconds`` allow (at least 3, or ``calls`` if fewer)."""
    for _ in range(max(1, warmup // 2)):
        _call(fn, xb)
    _sync(dev)
    t0 = time.perf_counter()
    done = 0
    while done < calls:
        _call(fn, xb)
        done += 1
        if done >= 3 and time.perf_counter() - t0 >= seconds:
            break
    _sync(dev)
    return float(b * done / (time.perf_counter() - t0))


class _PeakMemory:
    """Peak memory of the calls made between construction and ``result()``: the CUDA
    allocator's peak, else the growth of the process's RSS (its high-water mark reset, or
    ``sampler`` to run around the calls where the kernel will not reset it)."""

    def __init__(self, dev: torch.device) -> None:
        self.dev = dev
        self.on_cuda = dev.type == "cuda"
        self.sampler: _RssSampler | None = None
        if self.on_cuda:
            torch.cuda.reset_peak_memory_stats(dev)
            self.base_alloc = torch.cuda.memory_allocated(dev)
            return
        self.rss_before = _proc_status_kib("VmRSS")
        reset = self.rss_before is not None and _reset_peak_rss()
        self.hwm_before = _peak_rss_kib()  # without /proc: growth beyond the earlier peak only
        if self.rss_before is not None and not reset:
            self.sampler = _RssSampler()

    def result(self) -> dict[str, float]:
        if self.on_cuda:
            peak = torch.cuda.max_memory_allocated(self.dev)
            return {"peak_memory_mb": float(peak - self.base_alloc) / 2**20,
                    "peak_memory_total_mb": float(peak) / 2**20}
        peak = _peak_rss_kib() if self.sampler is None else self.sampler.peak_kib
        base = self.hwm_before if self.rss_before is None else self.rss_before
        return {"peak_memory_mb": max(0.0, (peak - base) / 1024.0)}


def _size(model: torch.nn.Module | None, checkpoint_path: str | os.PathLike[str] | None
          ) -> dict[str, float]:
    """``n_parameters`` and ``checkpoint_mb`` (the file, else ``torch.save`` of the state dict)."""
    out: dict[str, float] = {}
    if model is not None:
        out["n_parameters"] = float(sum(p.numel() for p in model.parameters()))
    if checkpoint_path is not None:
        out["checkpoint_mb"] = os.path.getsize(checkpoint_path) / 2**20
    elif model is not None:
        buf = io.BytesIO()
        torch.save(model.state_dict(), buf)
        out["checkpoint_mb"] = buf.getbuffer().nbytes / 2**20
    return out
