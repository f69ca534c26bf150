"""Walk-forward (rolling-origin) evaluation: many test periods instead of one.

The protocol, the same for every model and baseline:

* Folds are cut at whole trade dates. The test period is the last ``test_fraction`` of the
  trade dates (at most ``max_test_days``), and never less than ``folds x test_days`` dates,
  in ``folds`` contiguous blocks in time order: the evidence grows with the history while
  the number of retrainings (``folds``) stays what the profile sets. Scoring a test bar
  costs little next to training a fold, so a year of data is judged on months of test bars
  instead of the profile's minimum. Fold ``k`` trains on the
  dates before its test period (expanding window; ``window="sliding"`` keeps only the last
  ``train_days``), the last ``validation_days`` of which are its validation (early stopping).
* Embargo: the first ``embargo_bars`` (>= lookback + horizon) rows of each root in the
  validation and test parts are dropped, as in ``features.dataset``, so no test window shares
  a bar with a train window or a train target's future.
* Each fold re-fits its normalisation (observed features, target scale) on its own train
  part only, and every candidate is fitted from scratch on it (``Candidate.fit``).
* Every candidate is scored on the same decision bars and costs (``models.evaluation
  .backtest``). A forecaster trades its median forecast of the ``decision_horizon``-bar
  return (default: the dataset's horizon) through a no-trade band (``models.trading_rules
  .band_positions``): it enters beyond ``threshold_k`` x the one-way cost and holds until the
  forecast changes sign. A 1-bar forecast of a drift that pays over 5 bars seldom clears
  one tick, so the 1-bar rule hid the skill the generator's drift offers, and leaving a
  trade as soon as the forecast fell inside the band paid the cost twice as often
  (``docs/synthetic.md``). Metrics per fold and
  pooled over all test bars, with circular block
  bootstrap CIs over the pooled bars at the level the caller gives (Bonferroni-adjusted
  for the number of models and baselines compared: ``bonferroni_level``).

Rows come from a stored ``TrainingData`` (all splits, embargo gaps kept as segment breaks);
the trade date of a row is the caller's (``dates_of``), so this module needs no calendar.
"""

from __future__ import annotations

import gc
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from models.evaluation.backtest import decision_rows, run_backtest
from models.evaluation.candidates import BASELINE_PREFIX, Candidate, naive_baselines
from models.evaluation.folds import Fold, WalkForwardConfig, WalkForwardError, plan_folds
from models.evaluation.metrics import (
    forecast_metrics,
    quantile_index,
)
from models.evaluation.row_pool import (
    RowPool,
    dataset_version,
    dates_of_rows,
    fold_data,
)
from models.evaluation.skill import ScoredBars, bar_metrics, bonferroni_level
from models.trading_rules import band_positions
from models.windows import SplitArrays, TrainingData

# --- rows and per-fold datasets --------------------------------------------------------


# --- scoring --------------------------------------------------------------------------


def _positions_of(name: str, out: np.ndarray, split: SplitArrays, rows: np.ndarray) -> np.ndarray:
    pos = np.asarray(out, np.float64).reshape(-1)
    if pos.shape[0] == split.n_rows and split.n_rows != split.n_windows:
        pos = pos[rows]
    if pos.shape[0] != rows.size:
        raise WalkForwardError(f"{name}: {pos.shape[0]} positions for {rows.size} test windows")
    return pos


def score_fold(candidate: Candidate, data: TrainingData, fold: Fold, *,
               cost_multiplier: float = 1.0, threshold_k: float = 1.0,
               decision_horizon: int | None = None,
               row_days: np.ndarray | None = None) -> ScoredBars:
    """Fit ``candidate`` on the fold and backtest it on the fold's test bars; ``row_days``
    (one trade date per test row) labels the days of the daily IC."""
    h = _decision_horizon(data.meta, decision_horizon)
    split = data.splits["test"]
    rows = decision_rows(split.window_starts, data.lookback)
    seg = np.asarray(split.segment)[rows]
    brk = np.ones(rows.size, dtype=bool)
    brk[1:] = (np.diff(rows) != 1) | (seg[1:] != seg[:-1])
    runs = np.cumsum(brk)
    returns = np.asarray(split.targets[rows, 0], np.float64)
    cost = data.cost_log_return("test")[rows] * float(cost_multiplier)
    try:
        out = candidate.fit(data)(data)
    except Exception as e:
        raise WalkForwardError(f"fold {fold.number} ({fold.describe()['test']}): "
                               f"{candidate.name} failed: {e}") from e
    median = outcome = None
    qm: dict[str, float] = {}
    if candidate.kind == "forecaster":
        quantiles = list(data.meta["quantiles"])
        pred = np.asarray(out, np.float64)
        if pred.shape != (rows.size, data.horizon, len(quantiles)):
            raise WalkForwardError(f"fold {fold.number}: {candidate.name} predicted shape "
                                   f"{pred.shape}, expected {(rows.size, data.horizon, len(quantiles))}")
        if not np.isfinite(pred).all():
            raise WalkForwardError(f"fold {fold.number}: {candidate.name} predicted non-finite "
                                   "values")
        median = pred[:, :, quantile_index(quantiles, 0.5)]
        outcome = np.asarray(split.targets[rows], np.float64) / data.target_scale
        qm = {k: v for k, v in forecast_metrics(pred, outcome, quantiles).items()
              if k in ("q_risk_p50", "q_risk_p90", "coverage_80", "pinball_mean")}
        pos = band_positions(median[:, h - 1] * data.target_scale, cost, runs, threshold_k)
    else:
        pos = _positions_of(candidate.name, out, split, rows)
    bt = run_backtest(pos, returns, cost, runs, float(data.meta["bars_per_year"]))
    roots = np.asarray(data.meta.get("roots") or [])
    root_idx = np.asarray(split.root_index)[rows].astype(np.int64)
    root = roots[root_idx] if roots.size else root_idx.astype(str)
    return ScoredBars(
        pnl=bt.pnl, positions=bt.positions, returns=returns, root=np.asarray(root, str),
        day=(np.asarray(row_days)[rows] if row_days is not None
             else (np.asarray(split.ts_event)[rows] // 86_400_000_000_000).astype(str)),
        ts=np.asarray(split.ts_event)[rows], n_trades=bt.metrics["n_trades"],
        turnover=bt.metrics["turnover"], median=median, outcome=outcome, quantile_metrics=qm)


def _decision_horizon(meta: Mapping[str, Any], decision_horizon: int | None) -> int:
    horizon = int(meta["horizon"])
    h = horizon if decision_horizon is None else int(decision_horizon)
    if not 1 <= h <= horizon:
        raise WalkForwardError(f"decision_horizon={h} is outside the forecast's 1..{horizon}")
    return h


@dataclass
class FoldResult:
    fold: Fold
    metrics: dict[str, float]
    test_start_ns: int
    test_end_ns: int


@dataclass
class CandidateResult:
    name: str
    kind: str
    folds: list[FoldResult]
    pooled: dict[str, float]
    bars: ScoredBars  # pooled test bars (for equity charts)
    equals: str | None = None  # the baseline it equals on every test bar (``equal_baseline``)


@dataclass
class WalkForwardResult:
    protocol_id: str
    protocol: dict[str, Any]
    folds: list[Fold]
    candidates: dict[str, CandidateResult]


def default_references() -> list[Candidate]:
    """The baselines that cost nothing to fit: flat, buy-and-hold, momentum, climatology."""
    return naive_baselines((1,))


def equal_baseline(bars: ScoredBars, baselines: Mapping[str, ScoredBars]) -> str | None:
    """The baseline whose forecasts (a forecaster: the same median on every test bar) or
    else whose positions (on every test bar) ``bars`` repeat; ``None`` when none does. A
    model that is a baseline in disguise (an ensemble with all its weight on the
    climatology, a model that holds long throughout) is then named as such."""
    for name, other in baselines.items():
        if (bars.median is not None and other.median is not None
                and bars.median.shape == other.median.shape
                and np.allclose(bars.median, other.median, rtol=1e-6, atol=1e-9)):
            return name
    # positions: the trading baselines first (a forecaster baseline that never trades would
    # otherwise name a flat model after itself)
    for name, other in sorted(baselines.items(), key=lambda kv: kv[1].median is not None):
        if (bars.positions.shape == other.positions.shape
                and np.array_equal(bars.positions, other.positions)):
            return name
    return None


def protocol_of(pool: RowPool, folds: Sequence[Fold], config: WalkForwardConfig, *,
                cost_multiplier: float, level: float, bootstrap: int,
                decision_horizon: int | None = None, threshold_k: float = 1.0) -> dict[str, Any]:
    meta = pool.meta
    return {
        "decision_horizon": _decision_horizon(meta, decision_horizon),
        "forecaster_rule": {"rule": "band", "enter_cost_multiple": float(threshold_k),
                            "exit": "sign change"},
        "dataset_version": dataset_version(pool),
        "folds": [{"fold": f.number, **f.describe()} for f in folds],
        "walk_forward": asdict(config),
        "embargo_bars": config.embargo(int(meta["lookback"]), int(meta["horizon"])),
        "cost": {"cost_log_return": [round(float(c), 12) for c in meta["cost_log_return"]],
                 "roots": list(meta.get("roots") or []), "cost_multiplier": float(cost_multiplier)},
        "ci_level": round(float(level), 10),
        "bootstrap": int(bootstrap),
        "bars_per_year": float(meta["bars_per_year"]),
    }


def protocol_hash(protocol: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(protocol, sort_keys=True).encode()).hexdigest()[:16]


def protocol_id_for(pool: RowPool, config: WalkForwardConfig, *, n_compared: int,
                    cost_multiplier: float = 1.0, bootstrap: int = 1000,
                    decision_horizon: int | None = None, threshold_k: float = 1.0) -> str:
    """The id ``walk_forward`` will give its result, known before anything is trained (so a
    caller can skip candidates already scored under it)."""
    return protocol_hash(protocol_of(pool, plan_folds(pool.dates, config), config,
                                     cost_multiplier=cost_multiplier,
                                     level=bonferroni_level(n_compared), bootstrap=bootstrap,
                                     decision_horizon=decision_horizon, threshold_k=threshold_k))


def walk_forward(
    pool: RowPool,
    candidates: Sequence[Candidate],
    config: WalkForwardConfig,
    *,
    n_compared: int | None = None,
    cost_multiplier: float = 1.0,
    threshold_k: float = 1.0,
    decision_horizon: int | None = None,
    bootstrap: int = 1000,
    seed: int = 0,
    on_fold: Callable[[Fold, TrainingData], None] | None = None,
    references: Sequence[Candidate] | None = None,
) -> WalkForwardResult:
    """Score every candidate on the same folds; CIs at ``bonferroni_level(n_compared)``
    (default: the number of candidates). ``references`` (default: the trading baselines and
    the climatology, which cost nothing to fit) are scored beside them only to say which
    model equals a baseline on every test bar (``CandidateResult.equals``), also when that
    baseline was scored in an earlier call and is not among ``candidates``."""
    folds = plan_folds(pool.dates, config)
    level = bonferroni_level(n_compared or len(candidates))
    rules = _Rules(cost_multiplier, threshold_k, decision_horizon,
                   float(pool.meta["bars_per_year"]), level, bootstrap, seed)
    names = {c.name for c in candidates}
    refs = [r for r in (default_references() if references is None else references)
            if r.name not in names]
    per, ref_bars = _score_folds(pool, folds, config, candidates, refs, rules, on_fold)
    protocol = protocol_of(pool, folds, config, cost_multiplier=cost_multiplier, level=level,
                           bootstrap=bootstrap, decision_horizon=decision_horizon,
                           threshold_k=threshold_k)
    baselines = {**{n: ScoredBars.concat(b) for n, b in ref_bars.items()},
                 **{c.name: ScoredBars.concat([sb for _, sb in per[c.name]]) for c in candidates
                    if c.name.startswith(BASELINE_PREFIX)}}
    results = {c.name: _pooled_result(c, per[c.name], baselines, rules) for c in candidates}
    return WalkForwardResult(protocol_hash(protocol), protocol, folds, results)


@dataclass(frozen=True)
class _Rules:
    """How every candidate of one walk-forward is scored: the same costs, trading rule,
    bootstrap and confidence level on every fold."""

    cost_multiplier: float
    threshold_k: float
    decision_horizon: int | None
    bars_per_year: float
    level: float
    bootstrap: int
    seed: int

    def score(self, c: Candidate, data: TrainingData, fold: Fold, days: np.ndarray) -> ScoredBars:
        return score_fold(c, data, fold, cost_multiplier=self.cost_multiplier,
                          threshold_k=self.threshold_k, decision_horizon=self.decision_horizon,
                          row_days=days)

    def metrics(self, bars: ScoredBars) -> dict[str, float]:
        return bar_metrics(bars, self.bars_per_year, level=self.level, bootstrap=self.bootstrap,
                           seed=self.seed)


def _score_folds(
    pool: RowPool, folds: Sequence[Fold], config: WalkForwardConfig,
    candidates: Sequence[Candidate], refs: Sequence[Candidate], rules: _Rules,
    on_fold: Callable[[Fold, TrainingData], None] | None,
) -> tuple[dict[str, list[tuple[FoldResult, ScoredBars]]], dict[str, list[ScoredBars]]]:
    """Each candidate's (fold metrics, scored bars) per fold, and each reference's bars."""
    per: dict[str, list[tuple[FoldResult, ScoredBars]]] = {c.name: [] for c in candidates}
    ref_bars: dict[str, list[ScoredBars]] = {r.name: [] for r in refs}
    data = None
    for fold in folds:
        del data  # one fold's arrays at a time: the last fold's train part is most of a year
        # and what the last fold's models held: an SB3 agent is a reference cycle (model,
        # policy, env, callbacks) keeping its replay buffer and its state's arrays (a fold's
        # test features, ~100 MB a year) until a full collection, which nothing else forces
        gc.collect()
        data = fold_data(pool, fold, config)
        if on_fold is not None:
            on_fold(fold, data)
        ts = np.asarray(data.splits["test"].ts_event)
        days = dates_of_rows(pool, ts)
        for c in candidates:
            sb = rules.score(c, data, fold, days)
            m = rules.metrics(sb)
            m.update(sb.quantile_metrics)
            per[c.name].append((FoldResult(fold, m, int(ts.min()), int(ts.max())), sb))
        for r in refs:
            ref_bars[r.name].append(rules.score(r, data, fold, days))
    del data
    gc.collect()  # the last fold's models, before the pooled bootstrap
    return per, ref_bars


def _pooled_result(c: Candidate, per: list[tuple[FoldResult, ScoredBars]],
                   baselines: Mapping[str, ScoredBars], rules: _Rules) -> CandidateResult:
    """The candidate's metrics over all its test bars pooled (quantile metrics: the
    bars-weighted mean over folds) and the baseline it equals, if any."""
    pooled_bars = ScoredBars.concat([sb for _, sb in per])
    pooled = rules.metrics(pooled_bars)
    for k in ("q_risk_p50", "q_risk_p90", "coverage_80", "pinball_mean"):
        vals = [fr.metrics[k] for fr, _ in per if k in fr.metrics]
        if vals:  # bars-weighted mean over folds
            w = [fr.metrics["n_bars"] for fr, _ in per if k in fr.metrics]
            pooled[k] = float(np.average(vals, weights=w))
    same = (None if c.name.startswith(BASELINE_PREFIX)
            else equal_baseline(pooled_bars, baselines))
    return CandidateResult(c.name, c.kind, [fr for fr, _ in per], pooled, pooled_bars, same)
