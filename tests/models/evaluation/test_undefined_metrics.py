"""Undefined metrics are undefined (issue 24): a candidate that never held a position has no
Sharpe (NaN, NULL in the table, "-" on the leaderboard) rather than 0, and ICIR needs enough
full days of scored bars; a flat baseline still counts as earning nothing when a challenger
is compared with it."""

from __future__ import annotations

import math

import numpy as np

from models.evaluation.paired import compare
from models.evaluation.promotion import decide
from models.evaluation.skill import (
    MIN_IC_DAY_BARS,
    MIN_IC_DAYS,
    ScoredBars,
    bar_metrics,
    information_coefficients,
)

BPY = 347_760.0


def _bars(positions: np.ndarray, seed: int = 0) -> ScoredBars:
    rng = np.random.default_rng(seed)
    n = positions.size
    returns = rng.normal(0, 1e-4, n)
    return ScoredBars(pnl=positions * returns, positions=positions, returns=returns,
                      root=np.where(np.arange(n) % 2 == 0, "ES", "ZN"), day=np.arange(n) // 200,
                      ts=np.arange(n), n_trades=float(np.count_nonzero(np.diff(positions, prepend=0))),
                      turnover=float(np.abs(np.diff(positions, prepend=0)).sum()))


def test_a_candidate_that_never_traded_has_no_sharpe():
    idle = bar_metrics(_bars(np.zeros(1000)), BPY, level=0.95, bootstrap=100, seed=0)
    for k in ("sharpe", "sharpe_ci_low", "sharpe_ci_high", "hit_rate", "sharpe_ES", "sharpe_ZN"):
        assert math.isnan(idle[k]), k
    assert idle["n_trades"] == 0 and idle["total_log_return"] == 0  # what is defined stays
    # a root never traded has no Sharpe, the other keeps its own
    some = np.where(np.arange(1000) % 2 == 0, 1.0, 0.0)
    part = bar_metrics(_bars(some), BPY, level=0.95, bootstrap=100, seed=0)
    assert math.isfinite(part["sharpe"]) and math.isfinite(part["sharpe_ES"]) and math.isnan(part["sharpe_ZN"])


def _ic_inputs(bars_per_day: list[int], seed: int = 1):
    rng = np.random.default_rng(seed)
    day = np.repeat(np.arange(len(bars_per_day)), bars_per_day)
    outcome = rng.normal(size=(day.size, 1))
    median = 0.3 * outcome + rng.normal(size=(day.size, 1))
    return median, outcome, day


def test_icir_needs_enough_full_days():
    full = 3 * MIN_IC_DAY_BARS
    few = information_coefficients(*_ic_inputs([full] * (MIN_IC_DAYS - 1)))
    assert math.isnan(few["icir"]) and math.isfinite(few["ic"])
    enough = information_coefficients(*_ic_inputs([full] * MIN_IC_DAYS))
    assert math.isfinite(enough["icir"]) and enough["ic_days"] == MIN_IC_DAYS
    # a 60-bar stub of a day is no day of its own
    stub = information_coefficients(*_ic_inputs([full] * (MIN_IC_DAYS - 1) + [60]))
    assert math.isnan(stub["icir"]) and stub["ic_days"] == MIN_IC_DAYS - 1


def test_a_flat_baseline_without_sharpe_still_sets_the_bar_at_zero():
    """flat never holds a position: its Sharpe is undefined in the table, and 0 in the paired
    test, so a losing model loses to it and a winning one beats it."""
    rng = np.random.default_rng(0)
    losing = rng.standard_normal(3000) * 1e-4 - 2e-5
    winning = rng.standard_normal(3000) * 1e-4 + 2e-5
    cmp = compare({"baseline:flat": np.zeros(3000), "m v1": losing, "w v1": winning}, 80_000,
                  level=0.99, resamples=200)
    assert cmp.sharpe["baseline:flat"] == 0.0
    row = {"model": "m", "version": "1", "n_trades": 10.0}
    d = decide([row], cmp, ["baseline:flat"], None)
    assert not d.promote and "baseline:flat" in d.reason
    assert decide([{**row, "model": "w"}], cmp, ["baseline:flat"], None).promote
