"""Forecast and trading metrics against hand-computed references."""

import math

import numpy as np
import pytest

from models.evaluation.metrics import (
    block_bootstrap_ci,
    calibration_table,
    direction_hits,
    directional_accuracy,
    directional_accuracy_ci,
    forecast_metrics,
    interval_coverage,
    max_drawdown,
    median_mae,
    q_risk,
    sharpe_ci,
    sharpe_ratio,
    sortino_ratio,
)
from models.quantile import pinball_loss

Q3 = (0.1, 0.5, 0.9)
Q9 = tuple(round(0.1 * i, 1) for i in range(1, 10))


def test_pinball_loss_by_hand():
    pred = np.array([[[0.0, 1.0, 2.0]]])  # one window, one horizon, q 0.1/0.5/0.9
    y = np.array([[1.0]])
    # q=0.1: e=+1 -> 0.1; q=0.5: e=0 -> 0; q=0.9: e=-1 -> max(-0.9, 0.1) = 0.1
    np.testing.assert_allclose(pinball_loss(pred, y, Q3, axis=0), [[0.1, 0.0, 0.1]])


def test_pinball_loss_per_horizon_is_separate():
    pred = np.zeros((2, 2, 3))
    y = np.array([[1.0, -2.0], [1.0, -2.0]])
    pb = pinball_loss(pred, y, Q3, axis=0)
    np.testing.assert_allclose(pb[0], [0.1, 0.5, 0.9])
    np.testing.assert_allclose(pb[1], [1.8, 1.0, 0.2])


def test_q_risk_p50_and_p90_by_hand():
    y = np.array([[1.0], [-2.0]])
    pred = np.zeros((2, 1, 3))
    pred[:, 0, 2] = [2.0, 0.0]  # q0.9
    # P50: 0.5*1 + 0.5*2 = 1.5 -> 2*1.5/3
    assert q_risk(pred, y, Q3, 0.5) == pytest.approx(1.0)
    # P90: e=-1 -> 0.1, e=-2 -> 0.2 -> 2*0.3/3
    assert q_risk(pred, y, Q3, 0.9) == pytest.approx(0.2)


def test_q_risk_is_scale_free():
    rng = np.random.default_rng(1)
    pred, y = rng.normal(size=(50, 2, 3)), rng.normal(size=(50, 2))
    assert q_risk(pred * 1e-3, y * 1e-3, Q3, 0.5) == pytest.approx(q_risk(pred, y, Q3, 0.5))


def test_unknown_quantile_and_bad_shapes_are_named():
    with pytest.raises(ValueError, match="quantile 0.9"):
        q_risk(np.zeros((2, 1, 2)), np.ones((2, 1)), (0.1, 0.5), 0.9)
    with pytest.raises(ValueError, match="does not match"):
        forecast_metrics(np.zeros((2, 1, 3)), np.ones((3, 1)), Q3)


def test_coverage_counts_outcomes_inside_the_interval():
    pred = np.zeros((4, 1, 3))
    pred[:, 0, 0], pred[:, 0, 2] = -1.0, 1.0
    y = np.array([[0.0], [1.0], [1.5], [-3.0]])  # inside, on the edge, above, below
    assert interval_coverage(pred, y, Q3) == pytest.approx(0.5)


def test_calibration_of_exact_quantiles_matches_nominal():
    y = ((np.arange(1000) + 0.5) / 1000)[:, None]  # uniform on (0, 1)
    pred = np.broadcast_to(np.array(Q9), (1000, 1, 9))
    table = calibration_table(pred, y, Q9)
    np.testing.assert_allclose([r["observed"] for r in table], Q9, atol=1e-9)
    assert [r["quantile"] for r in table] == list(Q9)
    assert table[0]["observed_h1"] == pytest.approx(0.1)


def test_median_mae_and_directional_accuracy():
    pred = np.zeros((3, 1, 3))
    pred[:, 0, 1] = [1.0, -1.0, 0.5]
    y = np.array([[2.0], [1.0], [0.5]])
    assert median_mae(pred, y, Q3) == pytest.approx((1 + 2 + 0) / 3)
    f = np.array([1.0, -1.0, 1.0, 0.0, 2.0])
    o = np.array([1.0, 1.0, 0.0, 1.0, -3.0])
    # kept: 0 (hit), 1 (miss), 4 (miss); 2 dropped (zero outcome), 3 dropped (no call)
    np.testing.assert_array_equal(direction_hits(f, o), [1.0, 0.0, 0.0])
    assert directional_accuracy(f, o) == pytest.approx(1 / 3)
    assert math.isnan(directional_accuracy(np.zeros(3), np.ones(3)))


def test_sharpe_and_sortino_of_a_known_series():
    x = np.array([0.01, 0.03, -0.01, 0.01])
    # mean 0.01, sample var (0 + 0.0004 + 0.0004 + 0) / 3
    assert sharpe_ratio(x, 252) == pytest.approx(0.01 / math.sqrt(0.0008 / 3) * math.sqrt(252))
    # downside deviation sqrt(0.0001 / 4) = 0.005
    assert sortino_ratio(x, 252) == pytest.approx(2.0 * math.sqrt(252))
    assert sharpe_ratio(np.zeros(10), 252) == 0.0
    # annualisation follows bars per year: 4x the bars, 2x the Sharpe
    assert sharpe_ratio(x, 4 * 252) == pytest.approx(2 * sharpe_ratio(x, 252))


def test_max_drawdown_of_a_known_equity_curve():
    assert max_drawdown(np.array([1.0, 3.0, 2.0, 5.0, 1.0, 4.0])) == pytest.approx(4.0)
    assert max_drawdown(np.array([-1.0, -2.0, -0.5])) == pytest.approx(2.0)  # from the start
    assert max_drawdown(np.array([0.0, 1.0, 2.0])) == 0.0


def test_bootstrap_is_seeded_and_brackets_the_estimate():
    rng = np.random.default_rng(0)
    x = rng.normal(0.1, 1.0, size=500)
    mean = lambda a: a.mean(axis=1)  # noqa: E731
    a = block_bootstrap_ci(x, mean, n_resamples=300, seed=3)
    b = block_bootstrap_ci(x, mean, n_resamples=300, seed=3)
    c = block_bootstrap_ci(x, mean, n_resamples=300, seed=4)
    assert (a.low, a.high) == (b.low, b.high)
    assert (a.low, a.high) != (c.low, c.high)
    assert a.estimate == pytest.approx(x.mean())
    assert a.low < a.estimate < a.high
    assert a.block_length == round(500 ** (1 / 3))


def test_block_bootstrap_widens_for_autocorrelated_series():
    rng = np.random.default_rng(0)
    e = rng.normal(size=2000)
    x = np.empty_like(e)
    x[0] = e[0]
    for i in range(1, e.size):
        x[i] = 0.9 * x[i - 1] + e[i]
    mean = lambda a: a.mean(axis=1)  # noqa: E731
    iid = block_bootstrap_ci(x, mean, n_resamples=400, block_length=1, seed=0)
    blocks = block_bootstrap_ci(x, mean, n_resamples=400, block_length=50, seed=0)
    # the true sd of the mean of an AR(0.9) is ~ sqrt(19)x the iid one
    assert (blocks.high - blocks.low) > 2.5 * (iid.high - iid.low)


def test_sharpe_ci_and_direction_ci():
    rng = np.random.default_rng(5)
    noise = rng.normal(0, 1e-3, size=3000)
    ci = sharpe_ci(noise, 252 * 1380, n_resamples=400, seed=0)
    assert ci.includes(0.0) and ci.estimate == pytest.approx(sharpe_ratio(noise, 252 * 1380))
    drift = noise + 5e-4
    assert sharpe_ci(drift, 252 * 1380, n_resamples=400, seed=0).low > 0
    coin = directional_accuracy_ci(rng.normal(size=3000), rng.normal(size=3000),
                                   n_resamples=400, seed=0)
    assert coin.includes(0.5)
    y = rng.normal(size=500)
    assert directional_accuracy_ci(y, y, n_resamples=100).low == 1.0


def test_forecast_metrics_is_flat_and_complete():
    rng = np.random.default_rng(2)
    pred = np.sort(rng.normal(size=(40, 5, 9)), axis=2)
    y = rng.normal(size=(40, 5))
    m = forecast_metrics(pred, y, Q9)
    assert all(isinstance(v, float) for v in m.values())
    assert {"q_risk_p50", "q_risk_p90", "coverage_80", "median_mae",
            "directional_accuracy", "pinball_mean"} <= set(m)
    assert len([k for k in m if k.startswith("pinball_h")]) == 45
    assert m["pinball_h2_q0.30"] == pytest.approx(pinball_loss(pred, y, Q9, axis=0)[1, 2])


@pytest.mark.parametrize("n,block", [(500, None), (333, 7), (50, 50), (40, 1)])
def test_fast_sharpe_and_hit_ci_equal_the_generic_bootstrap(n, block):
    rng = np.random.default_rng(n)
    x = rng.normal(1e-4, 1e-3, n)
    fast = sharpe_ci(x, 1000.0, n_resamples=200, block_length=block, seed=9)
    slow = block_bootstrap_ci(
        x, lambda a: a.mean(axis=1) / a.std(axis=1, ddof=1) * math.sqrt(1000.0),
        n_resamples=200, block_length=block, seed=9)
    assert (fast.low, fast.high) == pytest.approx((slow.low, slow.high), rel=1e-9)
    f, o = rng.normal(size=n), rng.normal(size=n)
    hits = direction_hits(f, o)
    fast = directional_accuracy_ci(f, o, n_resamples=200, block_length=block, seed=9)
    slow = block_bootstrap_ci(hits, lambda a: a.mean(axis=1), n_resamples=200,
                              block_length=block, seed=9)
    assert (fast.low, fast.high) == pytest.approx((slow.low, slow.high), rel=1e-9)
