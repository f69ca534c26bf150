"""One model's out-of-sample evaluation on the test split, next to naive baselines.

Every model and baseline is backtested on the same *decision rows* (the last history row
of each test window) with the same costs, under the protocol of ``models.evaluation.backtest``.
The baselines are the walk-forward's own (``models.evaluation.candidates``: the same
positions, forecasts and ``baseline:<name>`` names), so the two reports cannot disagree on one.
Forecast metrics are in target-scaled units (targets / ``target_scale``, what the models
predict); q-risk, coverage and directional accuracy are scale-free. Confidence intervals
are circular block bootstrap percentile intervals (``models.evaluation.metrics``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from foxhunt_pipeline.basics.utc import iso_utc
from models.evaluation import plots
from models.evaluation.backtest import BacktestResult, decision_rows, run_backtest
from models.evaluation.candidates import climatology_candidate, trading_baselines
from models.evaluation.metrics import (
    calibration_table,
    direction_hits,
    directional_accuracy_ci,
    forecast_metrics,
    quantile_index,
    sharpe_ci,
)
from models.evaluation.running_cost import measure_running_cost
from models.evaluation.skill import idle_is_undefined
from models.trading_rules import threshold_positions
from models.windows import SplitArrays, TrainingData, WindowDataset, to_device

FAN_CHART_BARS = 300

#: Columns of the markdown comparison table: (metric key, header, format).
TABLE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("sharpe", "Sharpe", "{:.2f}"),
    ("sharpe_ci", "Sharpe 95% CI", ""),
    ("annual_log_return", "ann. return", "{:.4f}"),
    ("max_drawdown", "max DD", "{:.4f}"),
    ("win_rate_trades", "win rate (trades)", "{:.1%}"),
    ("n_trades", "trades", "{:.0f}"),
    ("exposure", "exposure", "{:.1%}"),
    ("directional_accuracy", "dir. acc.", "{:.1%}"),
    ("directional_accuracy_ci", "dir. acc. 95% CI", ""),
    ("q_risk_p50", "q-risk P50", "{:.4f}"),
    ("q_risk_p90", "q-risk P90", "{:.4f}"),
    ("coverage_80", "80% coverage", "{:.1%}"),
)


class EvaluationError(ValueError):
    """Bad input to an evaluation: says which model, split, batch or field."""


@dataclass
class EvaluationReport:
    name: str
    kind: str  # "forecaster" | "agent"
    metrics: dict[str, float]
    baselines: dict[str, dict[str, float]]
    markdown: str
    plots: dict[str, Path]
    period: dict[str, str]  # test_start / test_end, ISO UTC
    calibration: list[dict[str, float]] = field(default_factory=list)
    equity: dict[str, np.ndarray] = field(default_factory=dict)


# --- inputs -----------------------------------------------------------------------------


def split_period(split: SplitArrays) -> dict[str, str]:
    ts = np.asarray(split.ts_event)
    if ts.size == 0:
        return {"test_start": "", "test_end": ""}
    return {"test_start": iso_utc(ts.min()), "test_end": iso_utc(ts.max())}


def require_test_split(data: TrainingData, name: str) -> SplitArrays:
    """The test split, or an error with its dates when it has no window to evaluate."""
    split = data.splits.get("test")
    declared = (data.meta.get("splits") or {}).get("test")
    if split is None:
        raise EvaluationError(f"{name}: the dataset has no test split (meta says {declared!r})")
    if split.n_windows == 0:
        p = split_period(split)
        span = f"{p['test_start']} .. {p['test_end']}" if split.n_rows else "no rows"
        raise EvaluationError(
            f"{name}: the test split is empty: {split.n_rows} rows ({span}), 0 windows of "
            f"lookback {data.lookback} + horizon {data.horizon}; meta: {declared!r}"
        )
    return split


def check_feature_names(
    name: str, data: TrainingData, model_features: Mapping[str, Sequence[str]] | None
) -> None:
    """Fail when a model was trained on other inputs than this dataset provides."""
    if not model_features:
        return
    have = {"observed": data.observed_names, "known": data.known_names,
            "static": data.static_names}
    problems = []
    for kind, names in model_features.items():
        if kind not in have:
            raise EvaluationError(f"{name}: unknown feature kind {kind!r} (observed/known/static)")
        want, got = list(names), have[kind]
        if want != got:
            missing = [n for n in want if n not in got]
            extra = [n for n in got if n not in want]
            detail = f"missing {missing[:5]}, unexpected {extra[:5]}" if missing or extra \
                else "same names in a different order"
            problems.append(f"{kind} features ({len(want)} in model, {len(got)} in data): {detail}")
    if problems:
        raise EvaluationError(f"{name}: checkpoint does not match the dataset: " + "; ".join(problems))


def _inputs(batch: Mapping[str, torch.Tensor], device: str | torch.device) -> tuple:
    batch = to_device(batch, device)
    return batch["static"], batch["observed"], batch["known"]


def predict_windows(
    name: str,
    fn: Callable[..., Any],
    ds: WindowDataset,
    *,
    batch_size: int = 256,
    device: str | torch.device = "cpu",
    expect_shape: tuple[int, ...] | None = None,
) -> np.ndarray:
    """Run ``fn(static, observed, known)`` over every window in order; raise on a wrong
    shape or a non-finite output, naming the model and the batch."""
    outs = []
    with torch.inference_mode():
        for b, start in enumerate(range(0, len(ds), batch_size)):
            idx = np.arange(start, min(start + batch_size, len(ds)))
            out = fn(*_inputs(ds.batch(idx), device))
            arr = (out.detach().float().cpu().numpy() if isinstance(out, torch.Tensor)
                   else np.asarray(out, np.float64))
            if expect_shape is not None and arr.shape[1:] != expect_shape:
                raise EvaluationError(
                    f"{name}: batch {b} output has shape {arr.shape}, expected "
                    f"[{len(idx)}, {', '.join(map(str, expect_shape))}]"
                )
            if arr.shape[0] != len(idx):
                raise EvaluationError(f"{name}: batch {b} returned {arr.shape[0]} rows for {len(idx)}")
            bad = ~np.isfinite(arr)
            if bad.any():
                w = int(start + np.flatnonzero(bad.reshape(len(idx), -1).any(axis=1))[0])
                raise EvaluationError(
                    f"{name}: non-finite predictions in batch {b} (windows {start}.."
                    f"{start + len(idx) - 1}, first at window {w}); {int(bad.sum())} values"
                )
            outs.append(arr)
    return np.concatenate(outs, axis=0)


# --- shared trading part ----------------------------------------------------------------


@dataclass
class _Bars:
    rows: np.ndarray
    returns: np.ndarray  # raw horizon-1 log return of each decision row
    cost: np.ndarray  # one-way cost x multiplier
    runs: np.ndarray  # segment id, split further at any row gap
    ts: np.ndarray
    bars_per_year: float
    root: np.ndarray  # root name of each decision row (for per-root charts)


def _bars(data: TrainingData, split: SplitArrays, cost_multiplier: float) -> _Bars:
    for key in ("bars_per_year", "cost_log_return", "quantiles", "target_scale"):
        if key not in data.meta:
            raise EvaluationError(f"training dataset meta.json lacks {key!r}")
    if not cost_multiplier >= 0:
        raise EvaluationError(f"cost_multiplier must be >= 0, got {cost_multiplier!r}")
    rows = decision_rows(split.window_starts, data.lookback)
    seg = np.asarray(split.segment)[rows]
    brk = np.ones(rows.size, dtype=bool)
    brk[1:] = (np.diff(rows) != 1) | (seg[1:] != seg[:-1])
    return _Bars(
        rows=rows,
        returns=np.asarray(split.targets[rows, 0], np.float64),
        cost=data.cost_log_return("test")[rows] * float(cost_multiplier),
        runs=np.cumsum(brk),
        ts=np.asarray(split.ts_event)[rows],
        bars_per_year=float(data.meta["bars_per_year"]),
        root=root_names(data, split, rows),
    )


def root_names(data: TrainingData, split: SplitArrays, rows: np.ndarray) -> np.ndarray:
    """The root of each of ``rows`` (its index as text when the meta names no roots)."""
    idx = np.asarray(split.root_index)[rows].astype(np.int64)
    names = np.asarray(data.meta.get("roots") or [], dtype=str)
    return names[idx] if names.size > int(idx.max(initial=-1)) else idx.astype(str)


def _trading_metrics(
    bt: BacktestResult, bars: _Bars, bootstrap: int, seed: int
) -> dict[str, float]:
    m = dict(bt.metrics)
    ci = sharpe_ci(bt.pnl, bars.bars_per_year, n_resamples=bootstrap, seed=seed)
    m["sharpe_ci_low"], m["sharpe_ci_high"] = ci.low, ci.high
    m["bootstrap_block_length"] = float(ci.block_length)
    return idle_is_undefined(m, bt.positions)  # never in the market: no Sharpe, not 0


def _position_direction(positions: np.ndarray, bars: _Bars, bootstrap: int, seed: int
                        ) -> dict[str, float]:
    """Directional accuracy of the bars where a position was held (flat calls nothing)."""
    held = positions != 0
    hits = direction_hits(positions[held], bars.returns[held])
    if hits.size == 0:
        return {"directional_accuracy": float("nan"), "directional_accuracy_ci_low": float("nan"),
                "directional_accuracy_ci_high": float("nan")}
    ci = directional_accuracy_ci(positions[held], bars.returns[held], n_resamples=bootstrap,
                                 seed=seed)
    return {"directional_accuracy": ci.estimate, "directional_accuracy_ci_low": ci.low,
            "directional_accuracy_ci_high": ci.high}


def _trading_baselines(
    data: TrainingData, bars: _Bars, momentum_lookbacks: Sequence[int], bootstrap: int, seed: int,
) -> tuple[dict[str, dict[str, float]], dict[str, BacktestResult]]:
    """The walk-forward's trading baselines (one position per test window), backtested on
    this test split's decision bars, by name."""
    metrics, results = {}, {}
    for baseline in trading_baselines(momentum_lookbacks):
        pos = baseline.fit(data)(data)
        bt = run_backtest(pos, bars.returns, bars.cost, bars.runs, bars.bars_per_year)
        results[baseline.name] = bt
        metrics[baseline.name] = {**_trading_metrics(bt, bars, bootstrap, seed),
                                  **_position_direction(bt.positions, bars, bootstrap, seed)}
    return metrics, results


# --- reporting --------------------------------------------------------------------------


def _fmt(m: Mapping[str, float], key: str, fmt: str) -> str:
    if key.endswith("_ci"):
        lo, hi = m.get(f"{key}_low", np.nan), m.get(f"{key}_high", np.nan)
        if not (np.isfinite(lo) and np.isfinite(hi)):
            return "-"
        base = key.removesuffix("_ci")
        f = dict((k, f_) for k, _, f_ in TABLE_COLUMNS).get(base, "{:.3f}")
        return f"[{f.format(lo)}, {f.format(hi)}]"
    v = m.get(key, np.nan)
    return fmt.format(v) if np.isfinite(v) else "-"


def comparison_markdown(rows: Mapping[str, Mapping[str, float]]) -> str:
    """A markdown table, one line per model or baseline, columns from ``TABLE_COLUMNS``."""
    cols = [c for c in TABLE_COLUMNS
            if any(np.isfinite(m.get(c[0], m.get(f"{c[0]}_low", np.nan))) for m in rows.values())]
    head = "| model | " + " | ".join(h for _, h, _ in cols) + " |"
    sep = "|---|" + "---|" * len(cols)
    lines = [head, sep]
    for name, m in rows.items():
        lines.append(f"| {name} | " + " | ".join(_fmt(m, k, f) for k, _, f in cols) + " |")
    return "\n".join(lines)


def _header(name: str, kind: str, data: TrainingData, period: Mapping[str, str], bars: _Bars,
            cost_multiplier: float, threshold_k: float | None) -> str:
    rule = (f"; signal: horizon-1 median vs +/-{threshold_k:g} x cost" if threshold_k is not None
            else "")
    return (
        f"**{name}** ({kind}), test {period['test_start']} .. {period['test_end']}, "
        f"{bars.rows.size} decision bars, next-bar fills, cost x{cost_multiplier:g} "
        f"(one-way {np.median(bars.cost):.2e} log return){rule}; Sharpe annualised with "
        f"{bars.bars_per_year:g} bars/year; CIs: circular block bootstrap.\n\n"
    )


def _running_cost(
    fn: Callable[..., Any] | None, ds: WindowDataset, device: str, latency_calls: int,
    model: torch.nn.Module | None, checkpoint_path: Path | None,
    throughput_batch_sizes: Sequence[int],
) -> dict[str, float]:
    if fn is None or latency_calls <= 0:
        return {}

    def make_inputs(b: int) -> tuple:
        return _inputs(ds.batch(np.arange(b) % len(ds)), device)

    return measure_running_cost(
        fn, make_inputs, device=device, calls=latency_calls, model=model,
        checkpoint_path=checkpoint_path, throughput_batch_sizes=throughput_batch_sizes,
    )


# --- public entry points ----------------------------------------------------------------


def evaluate_forecaster(
    name: str,
    model: torch.nn.Module | Callable[..., torch.Tensor],
    data: TrainingData,
    *,
    out_dir: Path,
    device: str = "cpu",
    batch_size: int = 256,
    cost_multiplier: float = 1.0,
    threshold_k: float = 1.0,
    latency_calls: int = 200, bootstrap: int = 1000, seed: int = 0,
    momentum_lookbacks: Sequence[int] = (1,),
    model_features: Mapping[str, Sequence[str]] | None = None,
    checkpoint_path: Path | None = None,
    throughput_batch_sizes: Sequence[int] = (32, 256),
    make_plots: bool = True,
) -> EvaluationReport:
    """Evaluate a quantile forecaster ``model(static, observed, known) -> [B, H, Q]``
    (target-scaled) on the test split; ``latency_calls=0`` skips the running-cost timing,
    ``make_plots=False`` the PNGs."""
    split = require_test_split(data, name)
    check_feature_names(name, data, model_features)
    bars = _bars(data, split, cost_multiplier)
    quantiles = list(data.meta["quantiles"])
    ds = data.window_dataset("test")
    model = model.to(device).eval() if isinstance(model, torch.nn.Module) else model
    preds = predict_windows(name, model, ds, batch_size=batch_size, device=device,
                            expect_shape=(data.horizon, len(quantiles)))
    y = np.asarray(split.targets[bars.rows], np.float64) / data.target_scale
    scoring = _ForecastScoring(y, quantiles, data.target_scale, bars, threshold_k, bootstrap, seed)
    metrics, bt = scoring.score(preds)
    baselines, results = _trading_baselines(data, bars, momentum_lookbacks, bootstrap, seed)
    climatology = climatology_candidate()
    clim = climatology.fit(data)(data)
    baselines[climatology.name], results[climatology.name] = scoring.score(clim)
    metrics.update(_running_cost(model, ds, device, latency_calls,
                                 model if isinstance(model, torch.nn.Module) else None,
                                 checkpoint_path, throughput_batch_sizes))

    calib = calibration_table(preds, y, quantiles)
    equity, pnl = _curves(name, bt, results)
    figs = {} if not make_plots else _forecaster_plots(
        name, Path(out_dir), preds[:, 0] * data.target_scale, bars, quantiles, pnl,
        {name: calib, climatology.name: calibration_table(clim, y, quantiles)})
    period = split_period(split)
    md = (_header(name, "forecaster", data, period, bars, cost_multiplier, threshold_k)
          + comparison_markdown({name: metrics, **baselines}))
    return EvaluationReport(name=name, kind="forecaster", metrics=metrics, baselines=baselines,
                            markdown=md, plots=figs, period=period, calibration=calib,
                            equity=equity)


@dataclass
class _ForecastScoring:
    """Scores a ``[W, H, Q]`` forecast the same way for the model and the climatology:
    forecast metrics on the scaled outcomes ``y``, and the backtest of its horizon-1
    median traded through the +/- ``threshold_k`` x cost rule."""

    y: np.ndarray
    quantiles: list[float]
    target_scale: float
    bars: _Bars
    threshold_k: float
    bootstrap: int
    seed: int

    def score(self, p: np.ndarray) -> tuple[dict[str, float], BacktestResult]:
        bars, j50 = self.bars, quantile_index(self.quantiles, 0.5)
        m = forecast_metrics(p, self.y, self.quantiles)
        ci = directional_accuracy_ci(p[:, 0, j50], self.y[:, 0], n_resamples=self.bootstrap,
                                     seed=self.seed)
        m["directional_accuracy_ci_low"], m["directional_accuracy_ci_high"] = ci.low, ci.high
        pos = threshold_positions(p[:, 0, j50] * self.target_scale, bars.cost, self.threshold_k)
        bt = run_backtest(pos, bars.returns, bars.cost, bars.runs, bars.bars_per_year)
        return {**m, **_trading_metrics(bt, bars, self.bootstrap, self.seed)}, bt


def _curves(name: str, bt: BacktestResult, results: Mapping[str, BacktestResult]
            ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(equity, per-bar pnl) of the model and each baseline, the model first."""
    equity = {name: bt.equity, **{k: r.equity for k, r in results.items()}}
    pnl = {name: bt.pnl, **{k: r.pnl for k, r in results.items()}}
    return equity, pnl


def _forecaster_plots(name: str, out_dir: Path, h1_raw: np.ndarray, bars: _Bars,
                      quantiles: Sequence[float], pnl: Mapping[str, np.ndarray],
                      calibration: Mapping[str, Any]) -> dict[str, Path]:
    """Fan chart (``h1_raw``: horizon-1 quantiles ``[W, Q]`` in raw log returns), equity
    curves and calibration."""
    return {
        "fan_chart": plots.quantile_fan_chart(
            out_dir / f"{name}_fan_chart.png", h1_raw, bars.returns,
            quantiles, roots=bars.root, horizon=1, ts_ns=bars.ts, max_bars=FAN_CHART_BARS,
            title=f"{name}: quantile forecasts on the test split"),
        "equity": plots.equity_curves(out_dir / f"{name}_equity.png", pnl, roots=bars.root,
                                      ts_ns=bars.ts, title=f"{name} vs baselines, net of costs"),
        "calibration": plots.calibration_plot(
            out_dir / f"{name}_calibration.png", calibration,
            title=f"{name}: calibration on the test split"),
    }


def evaluate_agent(
    name: str,
    policy: np.ndarray | Callable[..., Any],
    data: TrainingData,
    *,
    out_dir: Path,
    model: torch.nn.Module | None = None,
    act_fn: Callable[..., Any] | None = None,
    device: str = "cpu",
    batch_size: int = 256,
    cost_multiplier: float = 1.0,
    latency_calls: int = 200,
    bootstrap: int = 1000,
    seed: int = 0,
    momentum_lookbacks: Sequence[int] = (1,),
    checkpoint_path: Path | None = None,
    throughput_batch_sizes: Sequence[int] = (32, 256),
    make_plots: bool = True,
) -> EvaluationReport:
    """Evaluate a trading agent from its positions in [-1, 1]: an array with one entry per
    test window (or per test row), or a callable ``(static, observed, known) -> [B]``.
    ``act_fn`` (default: ``policy`` when callable) is what the running cost times."""
    split = require_test_split(data, name)
    ds = data.window_dataset("test")
    bars = _bars(data, split, cost_multiplier)
    if callable(policy):
        act_fn = act_fn or policy
    pos = _agent_positions(name, policy, ds, split, bars, batch_size, device)
    bt = run_backtest(pos, bars.returns, bars.cost, bars.runs, bars.bars_per_year)
    metrics = {**_trading_metrics(bt, bars, bootstrap, seed),
               **_position_direction(bt.positions, bars, bootstrap, seed)}
    baselines, results = _trading_baselines(data, bars, momentum_lookbacks, bootstrap, seed)
    metrics.update(_running_cost(act_fn, ds, device, latency_calls, model, checkpoint_path,
                                 throughput_batch_sizes))
    equity, pnl = _curves(name, bt, results)
    figs = {} if not make_plots else {"equity": plots.equity_curves(
        Path(out_dir) / f"{name}_equity.png", pnl, roots=bars.root, ts_ns=bars.ts,
        title=f"{name} vs baselines, net of costs")}
    period = split_period(split)
    md = _header(name, "agent", data, period, bars, cost_multiplier, None)
    md += comparison_markdown({name: metrics, **baselines})
    return EvaluationReport(name=name, kind="agent", metrics=metrics, baselines=baselines,
                            markdown=md, plots=figs, period=period, equity=equity)


def _agent_positions(name: str, policy: np.ndarray | Callable[..., Any], ds: WindowDataset,
                     split: SplitArrays, bars: _Bars, batch_size: int, device: str) -> np.ndarray:
    """One position per decision row, checked finite and in [-1, 1]: the policy's output on
    the test windows, or the given array (per window, or per row and then picked)."""
    if callable(policy):
        pos = predict_windows(name, policy, ds, batch_size=batch_size, device=device)
        pos = pos.reshape(pos.shape[0], -1)
        if pos.shape[1] != 1:
            raise EvaluationError(f"{name}: policy must return one position per window, got "
                                  f"{pos.shape[1]} values each")
        pos = pos[:, 0]
    else:
        pos = np.asarray(policy, np.float64)
        if pos.ndim != 1 or pos.shape[0] not in (split.n_windows, split.n_rows):
            raise EvaluationError(
                f"{name}: positions have shape {pos.shape}; expected one per test window "
                f"({split.n_windows}) or per test row ({split.n_rows})")
        if pos.shape[0] == split.n_rows and split.n_rows != split.n_windows:
            pos = pos[bars.rows]
    bad = ~np.isfinite(pos) | (np.abs(pos) > 1 + 1e-9)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise EvaluationError(f"{name}: position of test window {i} (batch {i // batch_size}) "
                              f"is {pos[i]!r}; positions must be finite and in [-1, 1]")
    return pos
