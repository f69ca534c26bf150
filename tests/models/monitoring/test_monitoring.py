"""Drift, decay and the backtest band on streams whose truth is known: a shifted feature
drifts and an unshifted one does not; the CUSUM fails on P&L without the backtest's edge,
within the delay its threshold implies, and stays quiet on resamples of the backtest itself;
live P&L drawn from the backtest falls inside the band about as often as the band says."""

from __future__ import annotations

import numpy as np
import pytest

from models.monitoring import band, decay, drift, live

BARS_PER_YEAR = 23 * 60 * 252


def _ar1(rng: np.random.Generator, n: int, phi: float = 0.9) -> np.ndarray:
    """An autocorrelated feature, as minute features are."""
    e = rng.standard_normal(n) * np.sqrt(1 - phi**2)
    x = np.empty(n)
    x[0] = e[0]
    for i in range(1, n):
        x[i] = phi * x[i - 1] + e[i]
    return x


def test_psi_is_zero_for_the_same_sample_and_grows_with_the_shift():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(20_000)
    assert drift.psi(ref, ref) == pytest.approx(0.0, abs=1e-9)
    values = [drift.psi(ref, rng.standard_normal(2_000) + s) for s in (0.0, 0.5, 1.0)]
    assert values[0] < 0.02 < values[1] < values[2]
    assert values[2] > 0.25  # a shift of one sd is "significant" on the usual scale


def _days(rng: np.random.Generator, n_days: int, n: int, features: int = 5) -> dict:
    """Reference days of autocorrelated features whose level moves a little from day to
    day (as volatility does), and one feature that trends with time (days to expiry)."""
    out = {}
    for d in range(n_days):
        day = {f"f_{i}": _ar1(rng, n) + 0.3 * rng.standard_normal() for i in range(features)}
        day["f_days_to_expiry"] = np.full(n, 30.0 - d) + 0.01 * rng.standard_normal(n)
        out[f"d{d}"] = day
    return out


def test_a_shifted_feature_drifts_and_names_itself_while_the_others_stay():
    rng = np.random.default_rng(1)
    days = _days(rng, 12, 400)
    null = drift.reference_null(days)
    assert null.moving == ("f_days_to_expiry",)  # a new day differs from it by construction
    today = _days(rng, 1, 400)["d0"]
    today["f_days_to_expiry"] = today["f_days_to_expiry"] - 13.0
    quiet = drift.feature_drift(days, dict(today), null)
    assert not quiet.warn and len(quiet.features) == 5
    today["f_3"] = today["f_3"] * 2.5 + 3.0
    report = drift.feature_drift(days, today, null)
    assert report.warn and [f.name for f in report.drifted] == ["f_3"]
    assert report.top(1)[0].name == "f_3" and "f_3" in report.describe()


def test_new_days_like_the_reference_days_warn_about_as_often_as_promised():
    """A day from the same process as the 9 reference days warns at most ~1 in 10 times."""
    rng = np.random.default_rng(2)
    warns = 0
    for _ in range(20):
        days = _days(rng, 10, 200, features=4)
        ref = {k: v for k, v in list(days.items())[:9]}
        warns += drift.feature_drift(ref, days["d9"], drift.reference_null(ref)).warn
    assert warns <= 5


def test_the_vectorised_cusum_is_the_recursion():
    steps = np.random.default_rng(3).standard_normal((4, 300))
    s = decay.cusum(steps)
    for row, got in zip(steps, s, strict=True):
        acc, want = 0.0, []
        for x in row:
            acc = max(0.0, acc + x)
            want.append(acc)
        np.testing.assert_allclose(got, want)


def _backtest(rng: np.random.Generator, n: int, edge: float, sd: float = 1e-4) -> np.ndarray:
    """Per-bar P&L: fat-tailed noise around ``edge`` (flat bars are zeros)."""
    held = rng.random(n) < 0.6
    return np.where(held, edge + sd * rng.standard_t(4, n) / np.sqrt(2), 0.0)


def test_decay_is_found_when_the_edge_is_gone_and_not_on_the_backtest_itself():
    rng = np.random.default_rng(4)
    edge = 8e-6  # ~0.05 sd per bar: a Sharpe of ~25 at minute bars, as the demo's models
    test = {"ES": _backtest(rng, 8_000, edge)}
    refs = decay.references(test)
    th = decay.DecayThresholds(false_alarm=0.05, horizon_days=4)
    h = decay.calibrate(test, {"ES": 1_380}, refs, th, resamples=200)
    n = 4 * 1_380
    roots = np.full(n, "ES")
    # the calibrated level is what it says: ~5% of in-control 5-day streams pass it
    far = decay.false_alarm_rate(decay.in_control_steps(test, roots, refs, th.k_fraction, 200,
                                                        np.random.default_rng(9)), h)
    assert 0.0 < far < 0.15
    decayed = decay.detect(_backtest(rng, n, -1e-6), roots, refs, h, th)
    assert decayed.alarm
    # the CUSUM climbs by about delta - k per bar: found within a few times h / that
    assert decayed.first_alarm < 3 * h / (refs["ES"].delta * (1 - th.k_fraction))
    healthy = [decay.detect(_backtest(rng, n, edge), roots, refs, h, th).alarm for _ in range(20)]
    assert sum(healthy) <= 4
    assert decay.calibrate(test, {"ES": 1_380}, refs, decay.DecayThresholds(threshold=7.0)) == 7.0


def test_a_root_without_an_edge_is_not_monitored():
    rng = np.random.default_rng(5)
    refs = decay.references({"ES": _backtest(rng, 5_000, 8e-6), "ZN": _backtest(rng, 5_000, -2e-5)})
    steps, used = decay.increments(np.zeros(4), np.array(["ES", "ZN", "ES", "GC"]), refs, 0.5)
    assert used.tolist() == [True, False, True, False] and steps.size == 2


def test_live_bars_drawn_from_the_backtest_fall_inside_its_band():
    rng = np.random.default_rng(6)
    test = {"ES": _backtest(rng, 8_000, 8e-6), "ZN": _backtest(rng, 8_000, 4e-6)}
    days = [f"d{i}" for i in range(4)]
    counts = {"ES": [1380 * (i + 1) for i in range(4)], "ZN": [1380 * (i + 1) for i in range(4)]}
    b = band.rolling_band(test, counts, days, BARS_PER_YEAR, resamples=200, seed=0)
    assert b.sharpe.shape == (4, 3) and (b.sharpe[:, 0] < b.sharpe[:, 2]).all()
    assert (np.diff(b.sharpe[:, 2] - b.sharpe[:, 0]) < 0).all()  # narrower as days add up
    inside = 0
    for _ in range(40):  # live days drawn from the test bars themselves
        start = rng.integers(0, 8_000 - 1380 * 4)
        pnl = np.concatenate([test[r][start:start + 1380 * 4] for r in ("ES", "ZN")])
        eq = pnl.sum()
        inside += int(b.equity[-1, 0] <= eq <= b.equity[-1, 2])
    assert inside >= 30  # the 90% band holds ~90% of them (blocks of real runs: a bit less)
    bars = live.LiveBars(np.repeat(days, 10), np.tile(["ES", "ZN"], 20), rng.normal(0, 1, 40),
                         rng.normal(0, 1, 40), rng.normal(0, 1, 40), np.full(40, np.nan))
    rows = live.cumulative_by_day(bars, BARS_PER_YEAR)
    pooled = [r for r in rows if r["scope"] == live.POOLED]
    assert [r["bars"] for r in pooled] == [10.0, 20.0, 30.0, 40.0]
    assert np.isnan(pooled[-1]["pinball"])  # an agent's rows have none: NaN, not 0
