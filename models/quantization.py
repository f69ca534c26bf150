"""Smaller / faster variants of a trained model, each measured against fp32.

Findings on torch 2.13 (CPU build), which shaped this module:

- int8: ``torch.ao.quantization.quantize_dynamic`` still works (with a deprecation
  warning, silenced here) and covers ``nn.Linear``, ``nn.LSTM`` and ``nn.GRU``;
  weights are int8, activations quantized on the fly. ``torchao`` is not needed.
  Conv1d, LayerNorm and custom ops stay fp32. Dynamic-quantized kernels are CPU-only.
- fp16 / bf16: implemented as a weight cast (``module.to(dtype)``) behind a wrapper
  that casts inputs in and outputs back to fp32, so the variant is a drop-in
  replacement and can be exported. Whether a device runs it is decided by actually
  running a forward pass: any error (or non-finite output) becomes ``Unsupported``.

No Dagster and no MLflow here: callers get flat dicts and write them where they like.
"""

from __future__ import annotations

import copy
import io
import math
import statistics
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

PRECISIONS = ("fp32", "int8", "fp16", "bf16")
HALF_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
INT8_LAYER_TYPES: tuple[type[nn.Module], ...] = (nn.Linear, nn.LSTM, nn.GRU)

# Largest max|variant - fp32| / max|fp32| on fixed inputs that each precision may show.
# Loose enough for the rounding each format implies, tight enough to catch a broken cast.
OUTPUT_TOLERANCE = {"fp32": 1e-6, "fp16": 1e-2, "bf16": 5e-2, "int8": 1e-1}

Inputs = tuple[torch.Tensor, ...]


@dataclass
class Variant:
    """A runnable variant: takes the fp32 inputs the original takes, returns fp32 outputs."""

    precision: str
    module: nn.Module
    state_dict_bytes: int
    quantized_layers: int = 0
    notes: str = ""

    @property
    def supported(self) -> bool:
        return True


@dataclass(frozen=True)
class Unsupported:
    """A precision this device (or this model) cannot run, and why; reported, never raised."""

    precision: str
    reason: str

    @property
    def supported(self) -> bool:
        return False


@dataclass(frozen=True)
class Tolerance:
    """When a variant is accepted. ``max_rel_loss_increase`` is for forecasters (pinball
    loss), ``min_action_agreement`` / ``max_sharpe_drop`` for agents. ``recommend`` only
    picks a variant that meets the latency target: batch-1 median under
    ``latency_budget_ms`` (the legacy system's 5 ms target) or at most ``max_slowdown``
    x fp32 at batch 32."""

    max_rel_loss_increase: float = 0.05
    min_action_agreement: float = 0.95
    max_sharpe_drop: float | None = None
    max_slowdown: float = 1.25
    latency_budget_ms: float | None = 5.0


DEFAULT_TOLERANCE = Tolerance()


class PrecisionCast(nn.Module):
    """Runs ``inner`` (already cast to ``dtype``) on fp32 inputs and returns fp32 outputs."""

    def __init__(self, inner: nn.Module, dtype: torch.dtype):
        super().__init__()
        self.inner = inner
        self.dtype = dtype

    def forward(self, *inputs: torch.Tensor) -> Any:
        cast = [x.to(self.dtype) if x.is_floating_point() else x for x in inputs]
        return _map_tensors(self.inner(*cast), lambda t: t.float() if t.is_floating_point() else t)


# --- building variants ---------------------------------------------------------------


def state_dict_bytes(module: nn.Module) -> int:
    """Bytes of ``torch.save(state_dict)``: the size the weights take on disk."""
    buf = io.BytesIO()
    torch.save(module.state_dict(), buf)
    return len(buf.getvalue())


def quantize_variants(
    model: nn.Module,
    example_inputs: Sequence[torch.Tensor],
    *,
    precisions: Iterable[str] = PRECISIONS,
    device: str | torch.device = "cpu",
) -> dict[str, Variant | Unsupported]:
    """One entry per requested precision; each variant has run ``example_inputs`` once."""
    device = torch.device(device)
    base = copy.deepcopy(model).eval().to(device)
    inputs = tuple(x.to(device) for x in example_inputs)
    out: dict[str, Variant | Unsupported] = {}
    for precision in precisions:
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}; expected one of {PRECISIONS}")
        try:
            out[precision] = _build(precision, base, inputs, device)
        except Exception as exc:  # the point: report what this device can't do, don't crash
            out[precision] = Unsupported(precision, f"{type(exc).__name__}: {_first_line(exc)}")
    return out


def _build(precision: str, base: nn.Module, inputs: Inputs, device: torch.device) -> Variant | Unsupported:
    if precision == "fp32":
        module: nn.Module = copy.deepcopy(base).float()
        n_quantized = 0
        notes = "reference"
    elif precision == "int8":
        if device.type != "cpu":
            return Unsupported("int8", f"dynamic int8 kernels are CPU-only (device {device})")
        module = quantize_int8(base, inputs)
        n_quantized = count_quantized_layers(module)
        if n_quantized == 0:
            return Unsupported("int8", "no Linear / LSTM / GRU layer to quantize")
        kept = sorted(set(int8_candidates(base)) - set(called_layers(base, inputs)))
        notes = f"dynamic int8 on {n_quantized} Linear/LSTM/GRU layers; other layers fp32"
        if kept:
            notes += f" (weights read directly, kept fp32: {', '.join(kept[:8])}{' ...' if len(kept) > 8 else ''})"
    else:
        dtype = HALF_DTYPES[precision]
        if device.type == "cuda" and dtype is torch.bfloat16 and not torch.cuda.is_bf16_supported():
            return Unsupported(precision, f"{torch.cuda.get_device_name(device)} has no bf16 support")
        module = PrecisionCast(copy.deepcopy(base).to(dtype), dtype)
        n_quantized = 0
        notes = f"weights cast to {dtype}; inputs cast in, outputs cast back to fp32"
    module.eval()
    with torch.inference_mode():
        result = module(*inputs)
    bad = [t for t in _tensors(result) if t.is_floating_point() and not torch.isfinite(t).all()]
    if bad:
        return Unsupported(precision, f"forward pass gave non-finite outputs in {precision}")
    return Variant(precision, module, state_dict_bytes(module), n_quantized, notes)


def quantize_int8(model: nn.Module, example_inputs: Sequence[torch.Tensor] | None = None) -> nn.Module:
    """Dynamic int8 quantization of Linear / LSTM / GRU layers (CPU).

    With ``example_inputs``, only layers whose ``forward`` the model actually calls are
    quantized: a layer whose weight the model reads directly (``F.linear(x, self.lift.weight)``)
    must stay fp32, as a quantized layer's ``weight`` is a method, not a tensor."""
    engines = torch.backends.quantized.supported_engines
    if torch.backends.quantized.engine == "none" and engines:
        torch.backends.quantized.engine = "x86" if "x86" in engines else engines[0]
    model = copy.deepcopy(model).cpu().float().eval()
    spec: set[type[nn.Module]] | dict[str, Any] = set(INT8_LAYER_TYPES)
    if example_inputs is not None:
        called = called_layers(model, example_inputs)
        spec = {name: torch.ao.quantization.default_dynamic_qconfig for name in called}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization deprecation notices
        return torch.ao.quantization.quantize_dynamic(model, spec, dtype=torch.qint8)


def called_layers(model: nn.Module, example_inputs: Sequence[torch.Tensor]) -> list[str]:
    """Names of the Linear / LSTM / GRU layers whose ``forward`` runs on ``example_inputs``."""
    called: list[str] = []
    hooks = [
        m.register_forward_pre_hook(lambda _m, _a, name=name: called.append(name))
        for name, m in model.named_modules()
        if type(m) in INT8_LAYER_TYPES
    ]
    try:
        with torch.inference_mode():
            model(*(x.cpu() for x in example_inputs))
    finally:
        for h in hooks:
            h.remove()
    return sorted(set(called))


def int8_candidates(model: nn.Module) -> list[str]:
    return [name for name, m in model.named_modules() if type(m) in INT8_LAYER_TYPES]


def count_quantized_layers(module: nn.Module) -> int:
    qd = torch.ao.nn.quantized.dynamic
    return sum(1 for m in module.modules() if isinstance(m, (qd.Linear, qd.LSTM, qd.GRU)))


# --- measuring -----------------------------------------------------------------------


def pinball_loss(pred: torch.Tensor, target: torch.Tensor, quantiles: Sequence[float]) -> float:
    """Mean quantile loss of ``pred [B, H, Q]`` against ``target [B, H]``."""
    q = torch.as_tensor(quantiles, dtype=pred.dtype, device=pred.device)
    err = target.to(pred.device, pred.dtype).unsqueeze(-1) - pred
    return float(torch.maximum(q * err, (q - 1) * err).mean())


def positions_from_outputs(outputs: torch.Tensor, positions: Sequence[float] = (-1.0, 0.0, 1.0)) -> np.ndarray:
    """Greedy action per row (argmax of logits / Q-values) mapped to a position."""
    return np.asarray(positions, dtype=np.float64)[outputs.argmax(dim=-1).cpu().numpy()]


def sharpe_ratio(
    position: np.ndarray, returns: np.ndarray, *, cost: float = 0.0, periods_per_year: float = 252 * 1380
) -> float:
    """Annualised Sharpe of ``position * next return - cost * |position change|``."""
    position = np.asarray(position, dtype=np.float64)
    pnl = position * np.asarray(returns, dtype=np.float64)
    pnl -= cost * np.abs(np.diff(position, prepend=0.0))
    sd = pnl.std()
    return 0.0 if sd == 0 else float(pnl.mean() / sd * math.sqrt(periods_per_year))


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
    ref_t, var_t = _first_tensor(ref).float(), _first_tensor(var).float()
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


def batch_of(example_inputs: Sequence[torch.Tensor], batch: int) -> Inputs:
    """``example_inputs`` tiled / cut along dim 0 to ``batch`` rows."""
    out = []
    for x in example_inputs:
        reps = -(-batch // x.shape[0])
        out.append(x.repeat(reps, *([1] * (x.dim() - 1)))[:batch].clone())
    return tuple(out)


def evaluate_forecaster_variants(
    variants: Mapping[str, Variant | Unsupported],
    inputs: Sequence[torch.Tensor],
    targets: torch.Tensor,
    *,
    quantiles: Sequence[float],
    tolerance: Tolerance = DEFAULT_TOLERANCE,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], float] | None = None,
    latency_batches: Sequence[int] = (1, 32),
    latency_repeats: int = 15,
) -> list[dict[str, Any]]:
    """One flat row per precision: pinball-loss change, output distance, latency, size,
    accepted or not (and why). ``loss_fn(pred, target)`` overrides the pinball loss, so
    the evaluation code's own q-risk can be used."""

    def metric(out: Any) -> float:
        pred = _first_tensor(out).float()
        return loss_fn(pred, targets) if loss_fn else pinball_loss(pred, targets, quantiles)

    def accept(cmp: dict[str, float]) -> tuple[bool, str]:
        inc = cmp["metric_rel_change"]
        ok = inc <= tolerance.max_rel_loss_increase
        return ok, f"loss change {inc:+.2%} (limit +{tolerance.max_rel_loss_increase:.0%})"

    return _evaluate(variants, inputs, metric, accept, latency_batches, latency_repeats, "pinball_loss")


def evaluate_agent_variants(
    variants: Mapping[str, Variant | Unsupported],
    inputs: Sequence[torch.Tensor],
    returns: np.ndarray,
    *,
    cost: float = 0.0,
    periods_per_year: float = 252 * 1380,
    positions: Sequence[float] = (-1.0, 0.0, 1.0),
    tolerance: Tolerance = DEFAULT_TOLERANCE,
    sharpe_fn: Callable[[np.ndarray, np.ndarray], float] | None = None,
    latency_batches: Sequence[int] = (1, 32),
    latency_repeats: int = 15,
) -> list[dict[str, Any]]:
    """As ``evaluate_forecaster_variants`` for policies: agreement of greedy actions with
    fp32 and the Sharpe of the positions they imply on ``returns`` (row i's next return)."""
    ref = variants.get("fp32")
    if not isinstance(ref, Variant):
        raise ValueError("agent evaluation needs a supported fp32 reference variant")
    with torch.inference_mode():
        ref_pos = positions_from_outputs(_first_tensor(ref.module(*inputs)), positions)

    def sharpe(pos: np.ndarray) -> float:
        if sharpe_fn:
            return float(sharpe_fn(pos, returns))
        return sharpe_ratio(pos, returns, cost=cost, periods_per_year=periods_per_year)

    def metric(out: Any) -> float:
        return sharpe(positions_from_outputs(_first_tensor(out), positions))

    def accept(cmp: dict[str, float]) -> tuple[bool, str]:
        agree = cmp["action_agreement"]
        ok = agree >= tolerance.min_action_agreement
        why = f"action agreement {agree:.1%} (min {tolerance.min_action_agreement:.0%})"
        drop = cmp["metric_reference"] - cmp["metric_variant"]
        if tolerance.max_sharpe_drop is not None:
            ok = ok and drop <= tolerance.max_sharpe_drop
            why += f", Sharpe drop {drop:.3f} (max {tolerance.max_sharpe_drop})"
        return ok, why

    def extra(out: Any) -> dict[str, float]:
        pos = positions_from_outputs(_first_tensor(out), positions)
        return {"action_agreement": float((pos == ref_pos).mean())}

    rows = _evaluate(variants, inputs, metric, accept, latency_batches, latency_repeats, "sharpe", extra)
    for r in rows:
        if "metric_variant" in r:
            r["sharpe_delta"] = r["metric_variant"] - r["metric_reference"]
    return rows


def _evaluate(
    variants: Mapping[str, Variant | Unsupported],
    inputs: Sequence[torch.Tensor],
    metric: Callable[[Any], float],
    accept: Callable[[dict[str, float]], tuple[bool, str]],
    latency_batches: Sequence[int],
    latency_repeats: int,
    metric_name: str,
    extra: Callable[[Any], dict[str, float]] | None = None,
) -> list[dict[str, Any]]:
    ref = variants.get("fp32")
    if not isinstance(ref, Variant):
        raise ValueError("evaluation needs a supported fp32 reference variant")
    device = next((p.device for p in ref.module.parameters()), torch.device("cpu"))
    inputs = tuple(x.to(device) for x in inputs)
    ref_latency = {b: latency_ms(ref.module, batch_of(inputs, b), repeats=latency_repeats) for b in latency_batches}
    rows = []
    for precision, v in variants.items():
        row: dict[str, Any] = {"precision": precision, "metric": metric_name, "supported": v.supported}
        if isinstance(v, Unsupported):
            rows.append({**row, "accepted": False, "reason": f"not supported here: {v.reason}"})
            continue
        var_inputs = inputs if precision != "int8" else tuple(x.cpu() for x in inputs)
        cmp = compare_variant(ref.module, v.module, var_inputs, metric)
        if extra:
            with torch.inference_mode():
                cmp.update(extra(v.module(*var_inputs)))
        ok, why = (True, "reference") if precision == "fp32" else accept(cmp)
        tol = OUTPUT_TOLERANCE[precision]
        row.update(cmp)
        row["within_output_tolerance"] = cmp["rel_output_diff"] <= tol
        row["output_tolerance"] = tol
        for b in latency_batches:
            ms = ref_latency[b] if precision == "fp32" else latency_ms(
                v.module, batch_of(var_inputs, b), repeats=latency_repeats
            )
            row[f"latency_ms_b{b}"] = ms
            row[f"latency_ratio_b{b}"] = ms / ref_latency[b] if ref_latency[b] > 0 else float("nan")
        row["state_dict_bytes"] = v.state_dict_bytes
        row["size_ratio"] = ref.state_dict_bytes / v.state_dict_bytes
        row["quantized_layers"] = v.quantized_layers
        row["accepted"] = ok
        row["reason"] = why
        row["notes"] = v.notes
        rows.append(row)
    return rows


# --- choosing ------------------------------------------------------------------------


def recommend(rows: Sequence[Mapping[str, Any]], tolerance: Tolerance = DEFAULT_TOLERANCE) -> tuple[str, str]:
    """The smallest accepted variant that is not much slower than fp32, with the reasons
    in words. Rows come from ``evaluate_*_variants`` (optionally with ``artifact_bytes``)."""
    by_p = {r["precision"]: r for r in rows}
    ref = by_p.get("fp32")
    if ref is None:
        raise ValueError("recommend needs the fp32 row")
    size_key = "artifact_bytes" if all("artifact_bytes" in r for r in rows if r.get("supported")) else "state_dict_bytes"
    lat_key = _main_latency_key(ref)
    notes: list[str] = []
    candidates = []
    for r in rows:
        p = r["precision"]
        if p == "fp32":
            continue
        if not r.get("supported"):
            notes.append(f"{p} {r['reason']}")
        elif not r["accepted"]:
            notes.append(f"{p} rejected: {r['reason']}")
        elif lat_key and not _meets_latency(r, lat_key, tolerance):
            budget = f"batch 1 over {tolerance.latency_budget_ms} ms and " if tolerance.latency_budget_ms else ""
            notes.append(
                f"{p} within tolerance but too slow: {budget}{r[f'latency_ratio_{lat_key}']:.2f}x fp32 "
                f"latency at {lat_key.replace('b', 'batch ')} (max {tolerance.max_slowdown:.2f}x)"
            )
        else:
            candidates.append(r)
    if not ref.get("accepted", True):
        notes.insert(0, f"fp32 itself not deployable: {ref.get('reason', '')}")
    if not candidates:
        return "fp32", "fp32: no other variant qualifies; " + "; ".join(notes)
    best = min(candidates, key=lambda r: (r[size_key], r.get(f"latency_ms_{lat_key}", 0.0)))
    ratio = ref[size_key] / best[size_key]
    words = (
        f"{best['precision']}: {ratio:.2f}x smaller than fp32 ({_kb(ref[size_key])} -> "
        f"{_kb(best[size_key])}), {best['reason']}"
    )
    if lat_key:
        words += f", {best[f'latency_ratio_{lat_key}']:.2f}x fp32 latency at {lat_key.replace('b', 'batch ')}"
        if "latency_ms_b1" in best:
            words += f" ({best['latency_ms_b1']:.2f} ms at batch 1)"
    others = [f"{r['precision']} also accepted but larger" for r in candidates if r is not best]
    return best["precision"], "; ".join([words, *others, *notes])


# --- helpers -------------------------------------------------------------------------


def _meets_latency(row: Mapping[str, Any], lat_key: str, tolerance: Tolerance) -> bool:
    if row.get(f"latency_ratio_{lat_key}", 1.0) <= tolerance.max_slowdown:
        return True
    b1 = row.get("latency_ms_b1")
    return tolerance.latency_budget_ms is not None and b1 is not None and b1 <= tolerance.latency_budget_ms


def _main_latency_key(row: Mapping[str, Any]) -> str | None:
    keys = sorted(int(k.removeprefix("latency_ms_b")) for k in row if k.startswith("latency_ms_b"))
    if not keys:
        return None
    return f"b{32 if 32 in keys else keys[-1]}"


def _kb(n: float) -> str:
    return f"{n / 1024:.1f} KiB" if n < 1024**2 else f"{n / 1024**2:.2f} MiB"


def _rel_change(ref: float, new: float) -> float:
    if ref == 0:
        return 0.0 if new == 0 else math.copysign(math.inf, new)
    return (new - ref) / abs(ref)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, Mapping):
        return [t for v in obj.values() for t in _tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors(v)]
    return []


def _first_tensor(obj: Any) -> torch.Tensor:
    ts = _tensors(obj)
    if not ts:
        raise TypeError(f"model output has no tensor: {type(obj).__name__}")
    return ts[0]


def _map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple):
        return tuple(_map_tensors(v, fn) for v in obj)
    if isinstance(obj, list):
        return [_map_tensors(v, fn) for v in obj]
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    return obj


__all__ = [
    "DEFAULT_TOLERANCE",
    "OUTPUT_TOLERANCE",
    "PRECISIONS",
    "PrecisionCast",
    "Tolerance",
    "Unsupported",
    "Variant",
    "batch_of",
    "compare_variant",
    "count_quantized_layers",
    "evaluate_agent_variants",
    "evaluate_forecaster_variants",
    "latency_ms",
    "pinball_loss",
    "positions_from_outputs",
    "called_layers",
    "quantize_int8",
    "quantize_variants",
    "recommend",
    "sharpe_ratio",
    "state_dict_bytes",
]
