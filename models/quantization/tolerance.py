"""When a quantized variant is close enough to fp32, and fast enough, to be used."""

from __future__ import annotations

from dataclasses import dataclass

# Largest max|variant - fp32| / max|fp32| on fixed inputs that each precision may show.
# Loose enough for the rounding each format implies, tight enough to catch a broken cast.
OUTPUT_TOLERANCE = {"fp32": 1e-6, "fp16": 1e-2, "bf16": 5e-2, "int8": 1e-1}


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
