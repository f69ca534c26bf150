"""Model outputs as trees of tensors (a tensor, or tuples, lists and dicts of them).

The models return different shapes of output; quantization compares and casts them
without knowing which model produced them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

Inputs = tuple[torch.Tensor, ...]


def output_tensors(obj: Any) -> list[torch.Tensor]:
    """Every tensor in an output tree, depth first."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, Mapping):
        return [t for v in obj.values() for t in output_tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in output_tensors(v)]
    return []


def first_tensor(obj: Any) -> torch.Tensor:
    """The first tensor of an output tree: the one a variant is compared on."""
    ts = output_tensors(obj)
    if not ts:
        raise TypeError(f"model output has no tensor: {type(obj).__name__}")
    return ts[0]


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """The output tree with ``fn`` applied to every tensor, its structure kept."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple):
        return tuple(map_tensors(v, fn) for v in obj)
    if isinstance(obj, list):
        return [map_tensors(v, fn) for v in obj]
    if isinstance(obj, dict):
        return {k: map_tensors(v, fn) for k, v in obj.items()}
    return obj
