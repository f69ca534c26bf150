"""One call per model for the ``<model>_quantized`` assets: variants, evaluation on a split
of the training dataset with the evaluation code's metrics, artifacts for the accepted
variants, and the recommendation. Returns plain data (no Dagster, no MLflow)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from foxhunt_pipeline.basics.atomic import atomic_write
from models.agents.trading_env import (
    MarketData,
    evaluate_positions,
    policy_layout_config,
    policy_state,
    prepare_market_data,
)
from models.evaluation import metrics
from models.export import artifact_bytes, export_artifact, forecaster_metadata
from models.quantile import pinball_loss
from models.quantization import (
    DEFAULT_TOLERANCE,
    OUTPUT_TOLERANCE,
    PRECISIONS,
    Tolerance,
    Unsupported,
    Variant,
    batch_of,
    compare_variant,
    evaluate_forecaster_variants,
    latency_ms,
    quantize_variants,
    recommend,
)
from models.sharpe import sharpe_ratio
from models.windows import TrainingData


@dataclass
class QuantizationReport:
    model: str
    kind: str  # "forecaster" | "agent"
    rows: list[dict[str, Any]]  # one flat dict per precision
    recommended: str
    reason: str
    artifacts: dict[str, Path] = field(default_factory=dict)  # accepted precision -> artifact dir

    def metadata(self) -> dict[str, Any]:
        """Flat ``{precision}/{key}`` scalars plus the recommendation, for asset metadata."""
        out: dict[str, Any] = {"recommended": self.recommended, "recommendation_reason": self.reason}
        for r in self.rows:
            for k, v in r.items():
                if k != "precision" and isinstance(v, (str, int, float, bool)):
                    out[f"{r['precision']}/{k}"] = v
        out.update({f"{p}/artifact": str(a) for p, a in self.artifacts.items()})
        return out

    def to_json(self, path: str | os.PathLike[str]) -> Path:
        """The report, atomically; artifact paths relative to the report's directory when
        they lie under it, so a moved home (or a copy in object storage) still finds them."""
        path = Path(path)
        text = json.dumps({
            "model": self.model, "kind": self.kind, "recommended": self.recommended,
            "reason": self.reason, "rows": self.rows,
            "artifacts": {p: _relative_to(Path(a), path.parent) for p, a in self.artifacts.items()},
        }, indent=2, default=str)
        return atomic_write(path, lambda tmp: tmp.write_text(text))


def _relative_to(target: Path, base: Path) -> str:
    try:
        return target.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return str(target)


def quantize_forecaster(
    model: nn.Module,
    data: TrainingData,
    *,
    model_name: str,
    out_dir: str | os.PathLike[str],
    split: str = "test",
    max_windows: int = 2048,
    precisions: Iterable[str] = PRECISIONS,
    tolerance: Tolerance = DEFAULT_TOLERANCE,
    latency_repeats: int = 15,
    export_formats: Sequence[str] = ("torch.export", "torchscript"),
    device: str = "cpu",
) -> QuantizationReport:
    """Variants of a forecaster scored by mean pinball loss (``models.evaluation.metrics``) on up to
    ``max_windows`` evenly spaced windows of ``split``; accepted ones exported to
    ``out_dir/<model>_<precision>`` with the training normalisation in their sidecar."""
    ds = data.window_dataset(split)
    if len(ds) == 0:
        raise ValueError(f"{model_name}: split {split!r} has no windows to evaluate on")
    idx = np.unique(np.linspace(0, len(ds) - 1, min(max_windows, len(ds))).astype(np.int64))
    batch = ds.batch(idx)
    inputs = (batch["static"], batch["observed"], batch["known"])
    quantiles = list(data.meta["quantiles"])

    def loss(pred: torch.Tensor, target: torch.Tensor) -> float:
        return float(pinball_loss(pred.cpu().numpy(), target.cpu().numpy(), quantiles, axis=0).mean())

    variants = quantize_variants(model, batch_of(inputs, 4), precisions=precisions, device=device)
    rows = evaluate_forecaster_variants(
        variants, inputs, batch["target"], quantiles=quantiles, tolerance=tolerance,
        loss_fn=loss, latency_repeats=latency_repeats,
    )
    for r in rows:
        r["eval_windows"] = int(idx.size)
        r["eval_split"] = split

    def meta(precision: str) -> dict[str, Any]:
        return forecaster_metadata(data.meta, model=model_name, precision=precision)

    return _finish(model_name, "forecaster", variants, rows, batch_of(inputs, 4), meta, out_dir,
                   tolerance, export_formats)


AGENT_SERVING_KEYS = ("observed_names", "known_names", "static_names", "normalization", "roots",
                      "bar_seconds", "lookback", "horizon", "dataset_config")


def quantize_agent(
    policy: nn.Module,
    data: TrainingData,
    *,
    model_name: str,
    out_dir: str | os.PathLike[str],
    split: str = "test",
    precisions: Iterable[str] = PRECISIONS,
    tolerance: Tolerance = DEFAULT_TOLERANCE,
    latency_repeats: int = 15,
    export_formats: Sequence[str] = ("torch.export", "torchscript"),
    max_obs: int = 2048,
) -> QuantizationReport:
    """Variants of a ``PolicyNet`` (obs -> 3 action scores): each one backtested with
    ``trading_env.evaluate_positions`` on ``split`` (same costs as the evaluation);
    agreement = share of rows where its position equals fp32's; Sharpe per
    ``models.sharpe.sharpe_ratio`` on the net per-bar P&L."""
    state = policy_state(policy)  # the forecasters it observes stay fp32: only the policy varies
    market = prepare_market_data(data, split, policy_layout_config(policy), state=state)
    rows_idx = market.rows
    if rows_idx.size == 0:
        raise ValueError(f"{model_name}: split {split!r} has no tradable rows")
    obs = _spread_observations(market, max_obs)
    variants = quantize_variants(policy, batch_of(obs, 4), precisions=precisions)
    ref = variants.get("fp32")
    if not isinstance(ref, Variant):
        raise ValueError(f"{model_name}: fp32 reference could not run: {getattr(ref, 'reason', 'not requested')}")
    bpy = float(data.meta.get("bars_per_year", metrics.DEFAULT_BARS_PER_YEAR))
    fp32 = _AgentReference.of(ref, market, obs, bpy, latency_repeats)
    rows: list[dict[str, Any]] = []
    for precision, v in variants.items():
        row: dict[str, Any] = {"precision": precision, "metric": "sharpe", "supported": v.supported,
                               "eval_split": split, "eval_rows": int(rows_idx.size)}
        if isinstance(v, Unsupported):
            rows.append({**row, "accepted": False, "reason": f"not supported here: {v.reason}"})
            continue
        bt = fp32.backtest if precision == "fp32" else _backtest(v.module, market)
        row.update(_agent_row(precision, v, bt, bpy, fp32, obs, tolerance, latency_repeats))
        rows.append(row)

    def meta(precision: str) -> dict[str, Any]:
        # names and train-only stats too, so the artifact reads the features table by itself
        serving = {k: data.meta[k] for k in AGENT_SERVING_KEYS if k in data.meta}
        return {**serving, "model": model_name, "precision": precision, "kind": "agent",
                "policy_config": getattr(policy, "config", lambda: {})(),
                "feature_hash": data.meta.get("feature_hash"), "action_positions": [-1, 0, 1]}

    return _finish(model_name, "agent", variants, rows, batch_of(obs, 4), meta, out_dir, tolerance,
                   export_formats, extra_files=state.save if state is not None else None)


@dataclass
class _AgentReference:
    """What every agent variant is compared with: the fp32 policy's backtest, Sharpe,
    latency per batch size and size."""

    module: nn.Module
    backtest: dict[str, np.ndarray]
    sharpe: float
    latency: dict[int, float]
    state_dict_bytes: int

    @classmethod
    def of(cls, ref: Variant, market: MarketData, obs: tuple[torch.Tensor, ...],
           bars_per_year: float, latency_repeats: int) -> _AgentReference:
        bt = _backtest(ref.module, market)
        return cls(module=ref.module, backtest=bt,
                   sharpe=sharpe_ratio(bt["rewards"], bars_per_year),
                   latency={b: latency_ms(ref.module, batch_of(obs, b), repeats=latency_repeats)
                            for b in (1, 32)},
                   state_dict_bytes=ref.state_dict_bytes)


def _spread_observations(market: MarketData, max_obs: int) -> tuple[torch.Tensor]:
    """Observations (flat position) of up to ``max_obs`` evenly spaced tradable rows."""
    rows_idx = market.rows
    pick = rows_idx[np.unique(np.linspace(0, rows_idx.size - 1, min(max_obs, rows_idx.size)).astype(np.int64))]
    return (torch.from_numpy(market.observations(pick, 0)),)


def _backtest(module: nn.Module, market: MarketData) -> dict[str, np.ndarray]:
    """``evaluate_positions`` of the greedy actions of ``module`` on ``market``."""
    def act(o: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return module(torch.from_numpy(np.asarray(o, np.float32))).argmax(dim=1).numpy()

    return evaluate_positions(act, market)


def _agent_row(precision: str, v: Variant, bt: dict[str, np.ndarray], bars_per_year: float,
               ref: _AgentReference, obs: tuple[torch.Tensor, ...], tolerance: Tolerance,
               latency_repeats: int) -> dict[str, Any]:
    """One supported variant's row from its backtest ``bt``: output distance, Sharpe against
    fp32, action agreement, the verdict and its reason, latency and size."""
    sharpe = sharpe_ratio(bt["rewards"], bars_per_year)
    agree = float((bt["positions"] == ref.backtest["positions"]).mean())
    row = compare_variant(ref.module, v.module, obs, lambda out: 0.0)
    row.pop("metric_rel_change")
    row.update({"metric_reference": ref.sharpe, "metric_variant": sharpe,
                "sharpe_delta": sharpe - ref.sharpe, "action_agreement": agree})
    ok = precision == "fp32" or agree >= tolerance.min_action_agreement
    why = f"action agreement {agree:.1%} (min {tolerance.min_action_agreement:.0%})"
    if tolerance.max_sharpe_drop is not None and precision != "fp32":
        ok = ok and ref.sharpe - sharpe <= tolerance.max_sharpe_drop
        why += f", Sharpe {ref.sharpe:.3f} -> {sharpe:.3f} (max drop {tolerance.max_sharpe_drop})"
    row["within_output_tolerance"] = row["rel_output_diff"] <= OUTPUT_TOLERANCE[precision]
    for b in (1, 32):
        ms = ref.latency[b] if precision == "fp32" else latency_ms(v.module, batch_of(obs, b), repeats=latency_repeats)
        row[f"latency_ms_b{b}"] = ms
        row[f"latency_ratio_b{b}"] = ms / ref.latency[b] if ref.latency[b] > 0 else float("nan")
    row.update({"state_dict_bytes": v.state_dict_bytes, "size_ratio": ref.state_dict_bytes / v.state_dict_bytes,
                "quantized_layers": v.quantized_layers, "accepted": ok, "reason": why, "notes": v.notes})
    return row


def _finish(
    model_name: str,
    kind: str,
    variants: dict[str, Variant | Unsupported],
    rows: list[dict[str, Any]],
    example: tuple[torch.Tensor, ...],
    meta: Callable[[str], dict[str, Any]],
    out_dir: str | os.PathLike[str],
    tolerance: Tolerance,
    export_formats: Sequence[str],
    extra_files: Callable[[Path], Any] | None = None,
) -> QuantizationReport:
    """Export every accepted variant (an export failure un-accepts it, with the reason),
    then recommend among what could actually be deployed."""
    out_dir = Path(out_dir)
    artifacts: dict[str, Path] = {}
    for r in rows:
        v = variants[r["precision"]]
        if not (r.get("accepted") and isinstance(v, Variant)):
            continue
        try:
            path = export_artifact(v.module.cpu(), tuple(x.cpu() for x in example),
                                   out_dir / f"{model_name}_{r['precision']}",
                                   metadata={**meta(r["precision"]), "evaluation": _scalars(r)},
                                   formats=export_formats, extra_files=extra_files)
        except Exception as exc:
            r["accepted"] = False
            r["reason"] += f"; export failed: {type(exc).__name__}: {str(exc)[:300]}"
            continue
        artifacts[r["precision"]] = path
        r["artifact_bytes"] = artifact_bytes(path)
        r["artifact_format"] = json.loads((path / "meta.json").read_text())["format"]
    fp32 = next((r for r in rows if r["precision"] == "fp32"), None)
    for r in rows:
        if "size_ratio" in r:
            r["state_dict_size_ratio"] = r["size_ratio"]
            r["size_source"] = "weights as stored (no artifact)"
    if fp32 is not None and "artifact_bytes" in fp32:
        for r in rows:
            if "artifact_bytes" in r:
                # the size row is the files on disk: model file plus int8 weights file
                r["artifact_size_ratio"] = fp32["artifact_bytes"] / r["artifact_bytes"]
                r["size_ratio"] = r["artifact_size_ratio"]
                r["size_source"] = "artifact files on disk"
    deployable = [r for r in rows if r["precision"] == "fp32" or not r.get("accepted") or "artifact_bytes" in r]
    precision, reason = recommend(deployable, tolerance)
    return QuantizationReport(model_name, kind, rows, precision, reason, artifacts)


def _scalars(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if isinstance(v, (str, int, float, bool))}


__all__ = ["QuantizationReport", "quantize_agent", "quantize_forecaster"]
