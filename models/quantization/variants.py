"""Building the fp32 / int8 / fp16 / bf16 variants of a trained model.

Findings on torch 2.13 (CPU build), which shaped this module:

- int8: ``torch.ao.quantization.quantize_dynamic`` still works (with a deprecation
  warning, silenced here) and covers ``nn.Linear``, ``nn.LSTM`` and ``nn.GRU``;
  weights are int8, activations quantized on the fly. ``torchao`` is not needed.
  Dynamic-quantized kernels are CPU-only. Every other float Parameter of >= 1024
  elements (embeddings, batched per-variable weights, conv weights, Linear weights read
  directly) is rounded to weight-only int8 (``models.export.int8_weight_only``): fp32 compute,
  int8 storage in the artifact, dequantized at load time.
- fp16 / bf16: implemented as a weight cast (``module.to(dtype)``) behind a wrapper
  that casts inputs in and outputs back to fp32, so the variant is a drop-in
  replacement and can be exported. Whether a device runs it is decided by actually
  running a forward pass: any error (or non-finite output) becomes ``Unsupported``.
"""

from __future__ import annotations

import copy
import io
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from models.export.int8_weight_only import (
    apply_weight_only_int8,
    stored_bytes,
    weight_only_tensors,
)
from models.quantization.outputs import Inputs, map_tensors, output_tensors

PRECISIONS = ("fp32", "int8", "fp16", "bf16")
HALF_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
INT8_LAYER_TYPES: tuple[type[nn.Module], ...] = (nn.Linear, nn.LSTM, nn.GRU)


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


class PrecisionCast(nn.Module):
    """Runs ``inner`` (already cast to ``dtype``) on fp32 inputs and returns fp32 outputs."""

    def __init__(self, inner: nn.Module, dtype: torch.dtype):
        super().__init__()
        self.inner = inner
        self.dtype = dtype

    def forward(self, *inputs: torch.Tensor) -> Any:
        cast = [x.to(self.dtype) if x.is_floating_point() else x for x in inputs]
        return map_tensors(self.inner(*cast), lambda t: t.float() if t.is_floating_point() else t)


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
        weight_only = sorted(weight_only_tensors(module))
        notes = (f"dynamic int8 on {n_quantized} Linear/LSTM/GRU layers; weight-only int8 on "
                 f"{len(weight_only)} other tensors; smaller parameters stored fp16")
        if kept:
            notes += (f" (weights read directly, kept fp32: {', '.join(kept[:8])}{' ...' if len(kept) > 8 else ''};"
                      " stored weight-only)")
    else:
        dtype = HALF_DTYPES[precision]
        if device.type == "cuda" and dtype is torch.bfloat16 and not torch.cuda.is_bf16_supported():
            return Unsupported(precision, f"{torch.cuda.get_device_name(device)} has no bf16 support")
        module = PrecisionCast(copy.deepcopy(base).to(dtype), dtype)
        n_quantized = 0
        notes = f"weights cast to {dtype}; inputs cast in, outputs cast back to fp32"
    module.eval()
    compact_recurrent_weights(module)
    with torch.inference_mode():
        result = module(*inputs)
    bad = [t for t in output_tensors(result) if t.is_floating_point() and not torch.isfinite(t).all()]
    if bad:
        return Unsupported(precision, f"forward pass gave non-finite outputs in {precision}")
    size = stored_bytes(module) if precision == "int8" else state_dict_bytes(module)
    return Variant(precision, module, size, n_quantized, notes)


def compact_recurrent_weights(module: nn.Module) -> None:
    """A deep copy (or a dtype cast) of a CUDA LSTM loses cuDNN's single weight buffer, and
    cuDNN then re-packs the weights on every call. torch refuses to flatten bf16 weights,
    so a bf16 LSTM on CUDA still re-packs (H200: TFT bf16 at 0.58-0.80x fp32 at batch 256)."""
    for m in module.modules():
        if isinstance(m, nn.RNNBase):
            m.flatten_parameters()


def quantize_int8(
    model: nn.Module, example_inputs: Sequence[torch.Tensor] | None = None, *, weight_only: bool = True
) -> nn.Module:
    """Dynamic int8 quantization of Linear / LSTM / GRU layers (CPU), then (with
    ``weight_only``) weight-only int8 of the float Parameters left (see module docstring).

    With ``example_inputs``, only layers whose ``forward`` the model actually calls are
    quantized dynamically: a layer whose weight the model reads directly
    (``F.linear(x, self.lift.weight)``) keeps a float ``weight`` tensor, as a quantized
    layer's ``weight`` is a method; that tensor is stored weight-only instead."""
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
        quantized = torch.ao.quantization.quantize_dynamic(model, spec, dtype=torch.qint8)
    if weight_only:
        apply_weight_only_int8(quantized)
    return quantized


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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""
