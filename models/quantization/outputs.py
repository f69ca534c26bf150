"""Model outputs as trees of tensors (a tensor, or tuples, lists and dicts of them).

The models return different shapes of output; quantization compares and casts them
without knowing which model produced them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

Inputs = tuple[torch.Tensor, ...]


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
