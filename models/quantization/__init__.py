"""Smaller / faster variants of a trained model, each measured against fp32.

The steps live in their own modules and are all importable from here:
:mod:`models.quantization.variants` (building the variants; the torch findings that
shaped them), :mod:`models.quantization.measure` (metrics, output distance, latency),
:mod:`models.quantization.evaluate` (one row per precision),
:mod:`models.quantization.tolerance` (acceptance limits) and
:mod:`models.quantization.recommend` (choosing one).

No Dagster and no MLflow here: callers get flat dicts and write them where they like.
"""

from __future__ import annotations

from models.export import batch_of
from models.quantization.evaluate import evaluate_agent_variants, evaluate_forecaster_variants
from models.quantization.measure import (
    compare_variant,
    latency_ms,
    position_pnl,
    positions_from_outputs,
)
from models.quantization.outputs import Inputs
from models.quantization.recommend import recommend
from models.quantization.tolerance import DEFAULT_TOLERANCE, OUTPUT_TOLERANCE, Tolerance
from models.quantization.variants import (
    HALF_DTYPES,
    INT8_LAYER_TYPES,
    PRECISIONS,
    PrecisionCast,
    Unsupported,
    Variant,
    called_layers,
    count_quantized_layers,
    int8_candidates,
    quantize_int8,
    quantize_variants,
    state_dict_bytes,
)

__all__ = [
    "DEFAULT_TOLERANCE",
    "HALF_DTYPES",
    "INT8_LAYER_TYPES",
    "Inputs",
    "OUTPUT_TOLERANCE",
    "PRECISIONS",
    "PrecisionCast",
    "Tolerance",
    "Unsupported",
    "Variant",
    "batch_of",
    "compare_variant",
    "count_quantized_layers",
    "int8_candidates",
    "evaluate_agent_variants",
    "evaluate_forecaster_variants",
    "latency_ms",
    "position_pnl",
    "positions_from_outputs",
    "called_layers",
    "quantize_int8",
    "quantize_variants",
    "recommend",
    "state_dict_bytes",
]
