"""Measuring a variant against fp32: task metrics, output distance and latency."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from models.quantization.outputs import first_tensor


def positions_from_outputs(outputs: torch.Tensor, positions: Sequence[float] = (-1.0, 0.0, 1.0)) -> np.ndarray:
    """Greedy action per row (argmax of logits / Q-values) mapped to a position."""
    return np.asarray(positions, dtype=np.float64)[outputs.argmax(dim=-1).cpu().numpy()]


def position_pnl(position: np.ndarray, returns: np.ndarray, *, cost: float = 0.0) -> np.ndarray:
    """Per-bar net P&L ``position * next return - cost * |position change|``, for
    ``models.sharpe.sharpe_ratio`` (the one Sharpe)."""
    position = np.asarray(position, dtype=np.float64)
    pnl = position * np.asarray(returns, dtype=np.float64)
    pnl -= cost * np.abs(np.diff(position, prepend=0.0))
    return pnl


def compare_variant(
    reference_fn: Callable[..., Any],
    variant_fn: Callable[..., Any],
    inputs: Sequence[torch.Tensor],
    metric_fn: Callable[[Any], float],
) -> dict[str, float]:
    """Main metric of both on the same inputs, its relative change, and output distance."""
    with torch.inference_mode():
        ref = reference_fn(*inputs)
        var = variant_fn(*inputs)
    ref_t, var_t = first_tensor(ref).float(), first_tensor(var).float()
    m_ref, m_var = float(metric_fn(ref)), float(metric_fn(var))
    scale = float(ref_t.abs().max())
    diff = (var_t - ref_t).abs()
    return {
        "metric_reference": m_ref,
        "metric_variant": m_var,
        "metric_rel_change": _rel_change(m_ref, m_var),
        "max_abs_diff": float(diff.max()),
        "mean_abs_diff": float(diff.mean()),
        "rel_output_diff": float(diff.max()) / scale if scale > 0 else float(diff.max()),
    }


def latency_ms(
    fn: Callable[..., Any], inputs: Sequence[torch.Tensor], *, warmup: int | None = None, repeats: int = 15
) -> float:
    """Median wall time of one call, after warm-up (synchronising CUDA if used)."""
    warmup = min(3, repeats) if warmup is None else warmup
    sync = torch.cuda.synchronize if any(x.is_cuda for x in inputs) else (lambda: None)
    times = []
    with torch.inference_mode():
        for i in range(warmup + repeats):
            sync()
            t0 = time.perf_counter()
            fn(*inputs)
            sync()
            if i >= warmup:
                times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _rel_change(ref: float, new: float) -> float:
    if ref == 0:
        return 0.0 if new == 0 else math.copysign(math.inf, new)
    return (new - ref) / abs(ref)
