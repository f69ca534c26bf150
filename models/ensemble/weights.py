"""Combination weights, fitted on the validation split only.

Rule (quantiles): non-negative weights summing to 1 that minimise the pooled pinball loss
(mean over windows, horizons and quantiles) of the weighted average of the members'
quantiles on the validation windows. The average of monotone quantile curves is monotone,
so the ensemble needs no re-sorting. The loss is convex in the weights; it is minimised by
SLSQP on the simplex, and the result is compared with every single member and the equal
weights, keeping the best: on validation the ensemble is never worse than its best member.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from models.quantile import pinball_loss


@dataclass(frozen=True)
class FittedWeights:
    weights: dict[str, float]
    member_losses: dict[str, float]  # each member's validation pinball loss
    loss: float  # the combination's validation pinball loss
    method: str  # "slsqp" | "member" | "equal": which candidate won


def _combine(preds: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.tensordot(w, preds, axes=(0, 0))


def fit_quantile_weights(member_preds: Mapping[str, np.ndarray], targets: np.ndarray,
                         quantiles: Sequence[float]) -> FittedWeights:
    """Weights for ``member_preds`` (name -> ``[W, H, Q]``, or a broadcastable ``[H, Q]``)
    on validation ``targets`` ``[W, H]``, by the rule above."""
    if not member_preds:
        raise ValueError("no ensemble members to weight")
    names = list(member_preds)
    shape = (targets.shape[0], targets.shape[1], len(quantiles))
    preds = np.stack([np.broadcast_to(np.asarray(member_preds[n], np.float64), shape) for n in names])
    if not np.isfinite(preds).all():
        bad = [n for n, p in zip(names, preds, strict=True) if not np.isfinite(p).all()]
        raise ValueError(f"non-finite validation predictions from {bad}")

    def loss(w: np.ndarray) -> float:
        return float(pinball_loss(_combine(preds, w), targets, quantiles))

    m = len(names)
    candidates: dict[str, np.ndarray] = {"equal": np.full(m, 1.0 / m)}
    for i in range(m):
        candidates[f"member:{names[i]}"] = np.eye(m)[i]
    if m > 1:
        res = minimize(loss, candidates["equal"], method="SLSQP", bounds=[(0.0, 1.0)] * m,
                       constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1.0}],
                       options={"maxiter": 200, "ftol": 1e-10})
        w = np.clip(res.x, 0.0, None)
        candidates["slsqp"] = w / w.sum()
    scored = {k: loss(w) for k, w in candidates.items()}
    best = min(scored, key=lambda k: (scored[k], k != "slsqp"))
    w = candidates[best]
    w = np.where(w < 1e-4, 0.0, w)
    w = w / w.sum()
    return FittedWeights(
        weights={n: float(x) for n, x in zip(names, w, strict=True)},
        member_losses={n: scored[f"member:{n}"] for n in names},
        loss=loss(w), method=best.split(":")[0])


def combine_quantiles(member_preds: Mapping[str, np.ndarray],
                      weights: Mapping[str, float]) -> np.ndarray:
    """The weighted average of the members' ``[W, H, Q]`` quantiles (a member may be a
    broadcastable ``[H, Q]``, as the climatology is)."""
    names = list(weights)  # zero weights too: they carry the window count when only the
    # broadcast climatology is weighted
    arrays = [np.asarray(member_preds[n], np.float64) for n in names]
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    stacked = np.stack([np.broadcast_to(a, shape) for a in arrays])
    return _combine(stacked, np.asarray([weights[n] for n in names], np.float64))


def sole_member(weights: Mapping[str, float], tol: float = 1e-6) -> str | None:
    """The member holding all the weight (the ensemble then *is* that member), else ``None``."""
    full = [name for name, w in weights.items() if float(w) >= 1.0 - tol]
    return full[0] if len(full) == 1 else None
