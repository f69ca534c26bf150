"""Weight-only int8 storage for the float tensors dynamic quantization leaves behind.

``quantize_dynamic`` only converts ``nn.Linear`` / ``nn.LSTM`` / ``nn.GRU`` layers whose
``forward`` runs; embeddings, batched per-variable weights held as plain Parameters, conv
weights and Linear weights read directly stay fp32 and made up 60-80% of a TFT's int8
artifact. Each such Parameter with at least ``min_elements`` elements is rounded to
symmetric int8 with one fp32 scale per group of trailing elements (per output channel
for ``[out, in, ...]`` layouts), in place: the module keeps computing in fp32 with exactly
the values the artifact stores, so evaluating the variant measures what is deployed.
The int8 codes and scales ride along on the module (not in its state_dict) for
``models.export`` to write; the artifact dequantizes them at load time, so inference
costs nothing extra.
"""

from __future__ import annotations

import io

import torch
from torch import nn

WEIGHT_ONLY_ATTR = "_int8_weight_only"
WEIGHT_ONLY_MIN_ELEMENTS = 1024  # smaller tensors (biases, norms) stay float ...
FP16_MIN_ELEMENTS = 64  # ... stored as fp16 from this size (below it a record costs more)
MIN_GROUP = 64  # elements per scale at least, so fp32 scales cost <= 1/16 of the int8 bytes

Int8Tensor = tuple[torch.Tensor, torch.Tensor]  # (int8 codes, fp32 scales broadcastable to them)
# fp16-stored tensors are recorded as (fp16 values, empty scale): dequantize = .float()


def group_dims(shape: torch.Size | tuple[int, ...], min_group: int = MIN_GROUP) -> int:
    """How many leading dims keep their own scale: the trailing dims are merged until a
    group holds ``min_group`` elements (``[out, in]`` with ``in >= 64``: one per row)."""
    kept, group = len(shape), 1
    while kept > 0 and group < min_group:
        kept -= 1
        group *= shape[kept]
    return kept


def quantize_tensor(w: torch.Tensor, min_group: int = MIN_GROUP) -> Int8Tensor:
    """Symmetric int8: ``q = round(w / s)``, ``s = max|w| / 127`` per group."""
    w = w.detach().float().cpu()
    kept = group_dims(w.shape, min_group)
    dims = tuple(range(kept, w.dim()))
    amax = w.abs().amax(dim=dims, keepdim=True) if dims else w.abs()
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
    q = torch.clamp(torch.round(w / scale), -127, 127).to(torch.int8)
    return q, scale.contiguous()


def dequantize_tensor(q: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    return q.float() if scale is None or q.dtype == torch.float16 else q.float() * scale


def apply_weight_only_int8(
    module: nn.Module,
    *,
    min_elements: int = WEIGHT_ONLY_MIN_ELEMENTS,
    min_group: int = MIN_GROUP,
    fp16_min_elements: int | None = FP16_MIN_ELEMENTS,
) -> list[str]:
    """Round every float Parameter of ``module`` with ``>= min_elements`` elements to int8
    (and, with ``fp16_min_elements``, the smaller ones from that size to fp16) in place,
    whatever module holds it, and record the stored form; returns the int8 names. Tied
    parameters are handled once; buffers (quantile levels, masks) are left alone."""
    stored: dict[str, Int8Tensor] = dict(getattr(module, WEIGHT_ONLY_ATTR, {}))
    int8_names = []
    for name, p in module.named_parameters():
        if not p.is_floating_point() or name in stored:
            continue
        if p.numel() >= min_elements:
            q, scale = quantize_tensor(p, min_group)
            int8_names.append(name)
        elif fp16_min_elements is not None and p.numel() >= fp16_min_elements:
            q, scale = p.detach().cpu().to(torch.float16), torch.empty(0)
        else:
            continue
        with torch.no_grad():
            p.copy_(dequantize_tensor(q, scale).to(p.dtype))
        stored[name] = (q, scale)
    module.__dict__[WEIGHT_ONLY_ATTR] = stored
    return sorted(int8_names)


def weight_only_tensors(module: nn.Module, *, int8_only: bool = False) -> dict[str, Int8Tensor]:
    """The stored forms recorded by :func:`apply_weight_only_int8` (empty if none)."""
    out = dict(module.__dict__.get(WEIGHT_ONLY_ATTR, {}))
    return {k: v for k, v in out.items() if v[0].dtype == torch.int8} if int8_only else out


def stored_bytes(module: nn.Module) -> int:
    """Bytes of the weights as an int8 artifact stores them: the state dict without the
    weight-only tensors, plus their int8 codes and scales."""
    stored = weight_only_tensors(module)
    state = {k: v for k, v in module.state_dict().items() if k not in stored}
    buf = io.BytesIO()
    torch.save(state, buf)
    extra = sum(q.numel() * q.element_size() + s.numel() * s.element_size() for q, s in stored.values())
    return len(buf.getvalue()) + extra

