"""Quantile (pinball) loss and a head whose quantiles cannot cross.

The loss is ``max(q * (y - yhat), (q - 1) * (y - yhat))`` averaged over every
sample, horizon and quantile, the same definition the old system used, so numbers
are comparable. The torch and numpy versions must agree (tested): the numpy one
scores baselines that never touch torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def pinball_terms(diff: Any, q: Any) -> Any:
    """Per-element pinball loss ``max(q * e, (q - 1) * e)`` of errors ``e = y - yhat``.

    The one formula behind every pinball number in the project; it takes numpy arrays or
    torch tensors (whichever ``diff`` is), so training and scoring cannot drift apart."""
    maximum = torch.maximum if isinstance(diff, torch.Tensor) else np.maximum
    return maximum(q * diff, (q - 1.0) * diff)


def pinball_loss(pred: Any, target: Any, quantiles: Any, *, axis: int | None = None) -> Any:
    """Mean pinball loss of ``pred [..., Q]`` against ``target [...]``.

    Torch ``pred``: a differentiable scalar tensor (the training loss). Otherwise float64
    numpy, NaN targets skipped, ``pred`` broadcasting against ``target[..., None]`` (a
    climatology ``[H, Q]`` scores against targets ``[W, H]``): a float, or with ``axis``
    the mean over that axis only (``axis=0`` of ``[W, H, Q]`` gives the ``[H, Q]`` table)."""
    if isinstance(pred, torch.Tensor):
        q = torch.as_tensor(quantiles, dtype=pred.dtype, device=pred.device)
        target = torch.as_tensor(target, device=pred.device)
        return pinball_terms(target.unsqueeze(-1) - pred, q).mean()
    q = np.asarray(quantiles, dtype=np.float64)
    target = np.asarray(target, dtype=np.float64)
    terms = pinball_terms(target[..., None] - np.asarray(pred, dtype=np.float64), q)
    if axis is not None:
        return np.nanmean(terms, axis=axis)
    return float(np.nanmean(terms))


class MonotoneQuantileHead(nn.Module):
    """Linear map to a base quantile plus ``Q - 1`` non-negative increments.

    ``q_0 = base`` and ``q_i = base + sum_{j<=i} softplus(inc_j)``, so the output is
    non-decreasing along the last axis for every input: ordering is a property of
    the shape of the computation, not something training has to learn.
    """

    def __init__(self, in_features: int, n_quantiles: int):
        super().__init__()
        if n_quantiles < 1:
            raise ValueError(f"n_quantiles must be >= 1, got {n_quantiles}")
        self.n_quantiles = n_quantiles
        self.proj = nn.Linear(in_features, n_quantiles)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raw = self.proj(x)
        if self.n_quantiles == 1:
            return raw
        base = raw[..., :1]
        steps = F.softplus(raw[..., 1:])
        return torch.cat([base, base + torch.cumsum(steps, dim=-1)], dim=-1)
