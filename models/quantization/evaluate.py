"""One flat row per precision: a variant's metric change, latency, size and verdict.

Forecasters are judged on pinball loss, agents on greedy-action agreement and Sharpe;
both share :func:`_evaluate`, which measures every supported variant the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from models.evaluation import metrics
from models.export import batch_of
from models.quantile import pinball_loss
from models.quantization.measure import (
    compare_variant,
    latency_ms,
    position_pnl,
    positions_from_outputs,
)
from models.quantization.outputs import first_tensor
from models.quantization.tolerance import DEFAULT_TOLERANCE, OUTPUT_TOLERANCE, Tolerance
from models.quantization.variants import Unsupported, Variant
from models.sharpe import sharpe_ratio


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
        pred = first_tensor(out).float()
        return loss_fn(pred, targets) if loss_fn else float(pinball_loss(pred, targets, quantiles))

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
    periods_per_year: float = metrics.DEFAULT_BARS_PER_YEAR,
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
        ref_pos = positions_from_outputs(first_tensor(ref.module(*inputs)), positions)

    def metric(out: Any) -> float:
        pos = positions_from_outputs(first_tensor(out), positions)
        if sharpe_fn:
            return float(sharpe_fn(pos, returns))
        return sharpe_ratio(position_pnl(pos, returns, cost=cost), periods_per_year)

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
        pos = positions_from_outputs(first_tensor(out), positions)
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
