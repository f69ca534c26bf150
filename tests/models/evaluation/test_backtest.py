"""Backtest protocol and baselines against hand-computed references."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.climatology import climatology_quantiles
from models.evaluation.backtest import decision_rows, run_backtest
from models.evaluation.baselines import (
    buy_and_hold_positions,
    climatology_forecast,
    flat_positions,
    momentum_positions,
    trailing_return,
)
from models.sharpe import sharpe_ratio
from models.trading_rules import band_action, band_positions, threshold_positions
from tests.model_data import synthetic_training_data

BPY = 252 * 1380


def _one_segment(n):
    return np.zeros(n, dtype=np.int32)


def test_flat_earns_exactly_zero():
    r = np.random.default_rng(0).normal(0, 1e-3, 100)
    bt = run_backtest(flat_positions(100), r, 2e-5, _one_segment(100), BPY)
    assert bt.metrics["total_log_return"] == 0.0
    assert bt.metrics["total_cost"] == 0.0
    assert bt.metrics["n_trades"] == 0 and bt.metrics["exposure"] == 0.0
    assert not bt.pnl.any()


def test_buy_and_hold_earns_sum_of_returns_minus_one_entry_cost():
    r = np.random.default_rng(1).normal(0, 1e-3, 200)
    bt = run_backtest(buy_and_hold_positions(200), r, 3e-5, _one_segment(200), BPY)
    assert bt.metrics["total_log_return"] == pytest.approx(r.sum() - 3e-5)
    assert bt.metrics["n_trades"] == 1 and bt.metrics["exposure"] == 1.0
    np.testing.assert_allclose(bt.equity, np.cumsum(r) - 3e-5)


def test_cost_is_charged_once_per_change():
    pos = np.array([0, 1, 1, 1, 0, 0, -1, -1], dtype=float)
    bt = run_backtest(pos, np.zeros(8), 1e-3, _one_segment(8), BPY)
    np.testing.assert_allclose(bt.costs, [0, 1e-3, 0, 0, 1e-3, 0, 1e-3, 0])
    assert bt.metrics["turnover"] == 3.0
    assert bt.metrics["n_trades"] == 2
    # a flip trades two contracts
    flip = run_backtest(np.array([1.0, -1.0]), np.zeros(2), 1e-3, _one_segment(2), BPY)
    np.testing.assert_allclose(flip.costs, [1e-3, 2e-3])


def test_position_is_closed_at_every_roll_with_the_cost_charged():
    seg = np.array([0, 0, 0, 1, 1, 1])
    r = np.full(6, 0.01)
    bt = run_backtest(np.ones(6), r, 1e-3, seg, BPY)
    # entry at 0, forced exit at 2 (last bar of contract 0), entry at 3; the end stays open
    np.testing.assert_allclose(bt.costs, [1e-3, 0, 1e-3, 1e-3, 0, 0])
    assert bt.metrics["total_log_return"] == pytest.approx(0.06 - 3e-3)
    assert bt.metrics["n_trades"] == 2


def test_missing_return_forces_flat():
    r = np.array([0.01, 0.02, np.nan])
    bt = run_backtest(np.ones(3), r, 1e-3, _one_segment(3), BPY)
    assert bt.positions.tolist() == [1.0, 1.0, 0.0]
    assert bt.metrics["total_log_return"] == pytest.approx(0.03 - 2e-3)


def test_trade_pnl_and_win_rates_by_hand():
    pos = np.array([1, 1, -1, 0, 1, 0], dtype=float)
    r = np.array([0.01, 0.02, -0.03, 0.05, -0.01, 0.0])
    c = 1e-3
    bt = run_backtest(pos, r, c, _one_segment(6), BPY)
    # trade 1: 0.01 + 0.02 - entry - half the flip; trade 2: 0.03 - half the flip - exit
    # trade 3: -0.01 - entry - exit
    np.testing.assert_allclose(bt.trade_pnl, [0.028, 0.028, -0.012])
    assert bt.trade_pnl.sum() == pytest.approx(bt.metrics["total_log_return"])
    assert bt.metrics["win_rate_trades"] == pytest.approx(2 / 3)
    # bars in a position: 0, 1, 2 win; 4 loses
    assert bt.metrics["win_rate_bars"] == pytest.approx(3 / 4)
    assert bt.metrics["exposure"] == pytest.approx(4 / 6)
    assert bt.metrics["sharpe"] == pytest.approx(sharpe_ratio(bt.pnl, BPY))
    assert bt.metrics["max_drawdown"] == pytest.approx(
        np.max(np.maximum.accumulate(np.r_[0, bt.equity]) - np.r_[0, bt.equity]))


def test_continuous_positions_resize_within_one_trade():
    pos = np.array([0.5, 1.0, 0.25])
    bt = run_backtest(pos, np.zeros(3), 1e-3, _one_segment(3), BPY)
    np.testing.assert_allclose(bt.costs, [5e-4, 5e-4, 7.5e-4])
    assert bt.metrics["n_trades"] == 1
    assert bt.trade_pnl[0] == pytest.approx(-1.75e-3)


def test_bad_positions_name_the_row():
    with pytest.raises(ValueError, match="row 2"):
        run_backtest(np.array([0.0, 1.0, 2.0]), np.zeros(3), 0.0, _one_segment(3), BPY)
    with pytest.raises(ValueError, match="row 1"):
        run_backtest(np.array([0.0, np.nan]), np.zeros(2), 0.0, _one_segment(2), BPY)
    with pytest.raises(ValueError, match="expected 3"):
        run_backtest(np.zeros(2), np.zeros(3), 0.0, _one_segment(3), BPY)


def test_threshold_rule_is_cost_aware():
    f = np.array([3e-5, -3e-5, 1e-5, -1e-5, 0.0])
    assert threshold_positions(f, 2e-5, k=1.0).tolist() == [1, -1, 0, 0, 0]
    assert threshold_positions(f, 2e-5, k=2.0).tolist() == [0, 0, 0, 0, 0]
    assert threshold_positions(f, 0.0, k=1.0).tolist() == [1, -1, 1, -1, 0]
    with pytest.raises(ValueError, match="row 1"):
        threshold_positions(np.array([0.0, np.nan]), 1e-5)


def test_the_band_enters_beyond_the_cost_and_exits_when_the_sign_turns():
    f = np.array([1e-5, 3e-5, 1e-5, 0.5e-5, -1e-5, -3e-5, -1e-5, 0.0, -1e-5, 3e-5, 1e-5])
    assert band_positions(f, 2e-5, _one_segment(f.size)).tolist() == [
        0, 1, 1, 1, 0, -1, -1, 0, 0, 1, 1]
    # a new segment starts flat: the position held in the last one is not carried
    seg = np.r_[np.zeros(3, np.int64), np.ones(8, np.int64)]
    assert band_positions(f, 2e-5, seg)[3] == 0.0
    assert band_positions(f, 2e-5, seg, k=2.0).tolist() == [0] * 11
    with pytest.raises(ValueError, match="row 1"):
        band_positions(np.array([0.0, np.nan]), 1e-5, _one_segment(2))


def test_the_vectorised_band_is_the_one_step_rule_applied_bar_after_bar():
    rng = np.random.default_rng(5)
    n = 4000
    f = rng.normal(0, 2e-5, n) * (rng.random(n) > 0.05)  # some exact zeros
    cost = rng.uniform(1e-5, 3e-5, n)
    seg = np.cumsum(rng.random(n) < 0.01)
    held, expected = 0.0, np.zeros(n)
    for i in range(n):
        if i and seg[i] != seg[i - 1]:
            held = 0.0
        held = float(band_action(f[i:i + 1], 1.5 * cost[i:i + 1], held)[0])
        expected[i] = held
    got = band_positions(f, cost, seg, k=1.5)
    np.testing.assert_array_equal(got, expected)
    # it trades less than the symmetric band on the same forecasts
    changes = lambda p: int(np.abs(np.diff(p)).sum())  # noqa: E731
    assert changes(got) < changes(threshold_positions(f, cost, k=1.5))


def test_oracle_positions_win_and_lagged_positions_do_not():
    r = np.random.default_rng(3).normal(0, 1e-3, 5000)
    seg = _one_segment(5000)
    oracle = run_backtest(np.sign(r), r, 2e-5, seg, BPY)
    assert oracle.metrics["win_rate_bars"] > 0.9 and oracle.metrics["sharpe"] > 0
    lagged = run_backtest(np.r_[0.0, np.sign(r[:-1])], r, 2e-5, seg, BPY)
    assert lagged.metrics["total_log_return"] < oracle.metrics["total_log_return"] / 10


# --- baselines --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data():
    return synthetic_training_data(n_rows={"train": 600, "test": 500}, lookback=10,
                                   segment_length=200, seed=4)


def test_trailing_return_uses_only_past_rows_of_the_same_segment(data):
    test = data.splits["test"]
    rows = decision_rows(test.window_starts, data.lookback)
    r1 = trailing_return(test, rows, 1)
    np.testing.assert_allclose(r1, test.targets[rows - 1, 0].astype(np.float64))
    r3 = trailing_return(test, rows, 3)
    expect = sum(test.targets[rows - k, 0].astype(np.float64) for k in (1, 2, 3))
    np.testing.assert_allclose(r3, expect, rtol=1e-6)
    # a lookback reaching into the previous contract is unknown, not borrowed
    first_of_seg = np.flatnonzero(np.diff(test.segment) != 0)[0] + 1
    assert math.isnan(trailing_return(test, np.array([first_of_seg + 2]), 5)[0])
    mom = momentum_positions(test, rows, 1)
    np.testing.assert_array_equal(mom, np.sign(test.targets[rows - 1, 0]))


def test_climatology_is_the_unconditional_training_quantile(data):
    qs = data.meta["quantiles"]
    clim = climatology_quantiles(data, qs)
    train = data.splits["train"]
    y = train.targets[decision_rows(train.window_starts, data.lookback)].astype(np.float64)
    np.testing.assert_allclose(clim[:, 4] * data.target_scale, np.quantile(y, 0.5, axis=0))
    assert clim.shape == (data.horizon, len(qs))
    assert np.all(np.diff(clim, axis=1) >= 0)
    fc = climatology_forecast(clim, 7)
    assert fc.shape == (7, data.horizon, len(qs)) and np.array_equal(fc[3], clim)


# --- the vectorised backtest against a bar-by-bar loop ------------------------------------

def _loop_backtest(pos, r, c, seg):
    """The protocol written as the obvious loop: hold, pay per change, close at rolls."""
    pnl, held = [], 0.0
    for t in range(len(r)):
        if t > 0 and seg[t] != seg[t - 1]:
            held = 0.0  # closed on the previous bar
        p = pos[t] if np.isfinite(r[t]) else 0.0
        x = p * (r[t] if np.isfinite(r[t]) else 0.0) - c[t] * abs(p - held)
        if t + 1 < len(r) and seg[t + 1] != seg[t]:
            x -= c[t] * abs(p)
        pnl.append(x)
        held = p
    return np.array(pnl)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_vectorised_backtest_matches_the_loop(draw):
    n = draw.draw(st.integers(1, 40))
    rng = np.random.default_rng(draw.draw(st.integers(0, 2**31)))
    pos = rng.choice([-1.0, -0.5, 0.0, 0.5, 1.0], size=n)
    r = rng.normal(0, 1e-3, n)
    r[rng.random(n) < 0.1] = np.nan
    c = rng.uniform(0, 1e-4, n)
    seg = np.cumsum(rng.random(n) < 0.15)
    bt = run_backtest(pos, r, c, seg, BPY)
    np.testing.assert_allclose(bt.pnl, _loop_backtest(pos, r, c, seg), atol=1e-15)
    # every bar's pnl belongs to some trade (flat bars carry only exit costs)
    assert bt.trade_pnl.sum() == pytest.approx(bt.pnl.sum(), abs=1e-12)
