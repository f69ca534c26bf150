"""The forecasts of the same weights on the same rows, kept for the rest of the process.

Why: an agent's state is its forecasters' quantiles over a whole split, and within one run
the same fold's forecasters meet the same fold's rows again and again: the DQN and the PPO
walk-forwards each retrain their agents on the same folds, and each agent asset observes the
same production forecasters. Computing those forecasts was about a third of an agent
evaluation. Inference is deterministic (eval mode, no autograd), so a hit is exactly what the
forward pass would give. The key hashes everything the result depends on: the model's class,
config and every weight, the rows' inputs and segments, the window sizes, the batch size and
the device; a model whose weights cannot be hashed (quantized packed params) is not kept.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict

import numpy as np
import torch
from torch import nn

from models.windows import SplitArrays

#: entries kept per process (one is ``[rows, H * Q]`` float32: ~3.5 MB for 20k rows)
MAX_ENTRIES = 32

_kept: OrderedDict[bytes, np.ndarray] = OrderedDict()


def forecast_key(model: nn.Module, part: SplitArrays, lookback: int, horizon: int,
                 batch_size: int) -> bytes | None:
    """The hash of what ``forecasts(model, part, ...)`` depends on, or None if a weight is
    not a plain tensor."""
    h = hashlib.blake2b(digest_size=20)
    config = getattr(model, "config", None)
    described = config.to_dict() if hasattr(config, "to_dict") else repr(config)
    device = next(model.parameters()).device
    h.update(json.dumps([type(model).__module__, type(model).__qualname__, described, lookback,
                         horizon, batch_size, str(device)], default=str).encode())
    try:
        for name, tensor in model.state_dict().items():
            h.update(name.encode())
            h.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy())
    except (AttributeError, RuntimeError, TypeError):
        return None
    for array in (part.static, part.observed, part.known, part.segment):
        array = np.ascontiguousarray(array)
        h.update(str((array.dtype, array.shape)).encode())
        h.update(array)
    return h.digest()


def recall(key: bytes | None) -> np.ndarray | None:
    """A copy of the forecasts kept under ``key`` (the caller may write into it)."""
    if key is None or key not in _kept:
        return None
    _kept.move_to_end(key)
    return _kept[key].copy()


def keep(key: bytes | None, forecasts: np.ndarray) -> None:
    if key is None:
        return
    _kept[key] = forecasts.copy()
    _kept.move_to_end(key)
    while len(_kept) > MAX_ENTRIES:
        _kept.popitem(last=False)


def forget() -> None:
    """Drop every kept forecast (tests; or to bound memory in a long-lived process)."""
    _kept.clear()
