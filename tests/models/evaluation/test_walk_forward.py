"""Walk-forward evaluation: folds by date, embargo, per-fold normalisation, same bars for
every candidate, honest metrics, the protocol id, and the LightGBM integration."""

import math
import types

import numpy as np
import pytest

import models.evaluation.candidates as candidates
from models.evaluation.backtest import decision_rows
from models.evaluation.candidates import (
    Candidate,
    climatology_candidate,
    lightgbm_candidate,
    trading_baselines,
)
from models.evaluation.row_pool import WalkForwardError, fold_data, row_pool
from models.evaluation.skill import bonferroni_level
from models.evaluation.walk_forward import (
    WalkForwardConfig,
    plan_folds,
    protocol_id_for,
    walk_forward,
)
from models.lightgbm import LightGBMConfig
from tests.model_data import synthetic_training_data

LOOKBACK, HORIZON = 8, 2
SIX_HOURS = 6 * 3600 * 10**9


def quarter_days(ts: np.ndarray) -> np.ndarray:
    """Stand-in calendar: every 6 hours is a 'trade date' (keeps the data tiny)."""
    return np.asarray(ts) // SIX_HOURS


def _data(signal: float, seed: int):
    return synthetic_training_data(
        n_rows={"train": 2400, "validation": 700, "test": 700}, n_observed=3, n_known=2,
        n_static=2, lookback=LOOKBACK, horizon=HORIZON, signal=signal, segment_length=350,
        seed=seed)


@pytest.fixture(scope="module")
def signal_pool():
    return row_pool(_data(0.4, 3), quarter_days)


@pytest.fixture(scope="module")
def noise_pool():
    return row_pool(_data(0.0, 4), quarter_days)


CFG = WalkForwardConfig(folds=3, test_days=2)


def signal_forecaster(name: str = "foxhunt-signal") -> Candidate:
    """'Trains' by least squares of the scaled h1 target on the last observed f_0."""
    def fit(train):
        s = train.splits["train"]
        rows = decision_rows(s.window_starts, train.lookback)
        x = np.asarray(s.observed[rows, 0], np.float64)
        y = np.asarray(s.targets[rows, 0], np.float64) / train.target_scale
        a = float(x @ y / (x @ x))
        z = np.linspace(-1.28, 1.28, len(train.meta["quantiles"]))

        def predict(d):
            t = d.splits["test"]
            m = a * np.asarray(t.observed[decision_rows(t.window_starts, d.lookback), 0])
            return m[:, None, None] + z[None, None, :] * np.ones((1, d.horizon, 1))
        return predict
    return Candidate(name, "forecaster", fit)


def test_folds_are_whole_dates_in_time_order():
    dates = [f"2024-01-{d:02d}" for d in range(1, 13)]
    folds = plan_folds(dates, WalkForwardConfig(folds=3, test_days=2, validation_days=1))
    assert [f.test_dates for f in folds] == [tuple(dates[6:8]), tuple(dates[8:10]),
                                             tuple(dates[10:12])]
    for f in folds:
        assert f.train_dates[0] == dates[0]  # expanding
        assert f.train_dates[-1] < f.validation_dates[0] <= f.validation_dates[-1] < f.test_dates[0]
    sliding = plan_folds(dates, WalkForwardConfig(folds=3, test_days=2, window="sliding",
                                                  train_days=3))
    assert [len(f.train_dates) for f in sliding] == [3, 3, 3]
    assert sliding[-1].train_dates == tuple(dates[6:9])


def test_too_few_dates_says_how_many_are_needed():
    with pytest.raises(WalkForwardError, match=r"need at least 8 trade dates.*has 5"):
        plan_folds([f"d{i}" for i in range(5)], WalkForwardConfig(folds=3, test_days=2))


def test_fold_data_embargoes_and_normalises_on_its_train_part_only(signal_pool):
    fold = plan_folds(signal_pool.dates, CFG)[0]
    d = fold_data(signal_pool, fold, CFG)
    train, val, test = (d.splits[s] for s in ("train", "validation", "test"))
    assert np.abs(np.asarray(train.observed, np.float64).mean(axis=0)).max() < 1e-4
    assert np.abs(np.asarray(train.observed, np.float64).std(axis=0) - 1).max() < 1e-3
    embargo = LOOKBACK + HORIZON
    for part, before in ((val, train), (test, val)):
        for r in np.unique(part.root_index):
            first = np.asarray(part.ts_event)[np.asarray(part.root_index) == r].min()
            prior = np.asarray(before.ts_event)[np.asarray(before.root_index) == r]
            if prior.size == 0:
                continue
            prior = prior.max()
            assert (first - prior) // 60_000_000_000 > embargo
    # test rows cannot move the fold's normalisation
    data = _data(0.4, 3)
    for part in data.splits.values():
        part.observed = np.array(part.observed)
        part.observed[np.isin(quarter_days(part.ts_event), np.asarray(fold.test_dates, int))] += 100.0
    altered = row_pool(data, quarter_days)
    assert not np.array_equal(fold_data(altered, fold, CFG).splits["test"].observed,
                              d.splits["test"].observed)
    d2 = fold_data(altered, fold, CFG)
    assert d2.meta["normalization"] == d.meta["normalization"]
    assert d2.target_scale == d.target_scale


def test_every_candidate_is_scored_on_the_same_bars(signal_pool):
    cands = [signal_forecaster(), climatology_candidate(), *trading_baselines((1,))]
    res = walk_forward(signal_pool, cands, CFG, bootstrap=200)
    assert len(res.folds) == 3
    n_bars = {name: [f.metrics["n_bars"] for f in r.folds] for name, r in res.candidates.items()}
    assert len({tuple(v) for v in n_bars.values()}) == 1
    flat = res.candidates["baseline:flat"]
    assert flat.pooled["n_trades"] == 0 and flat.pooled["turnover"] == 0
    assert math.isnan(flat.pooled["hit_rate"])  # no traded bar: undefined, not 0
    # a constant forecast has no IC within a fold: undefined, not 0
    assert all(math.isnan(f.metrics["ic"]) for f in res.candidates["baseline:climatology"].folds)
    sig = res.candidates["foxhunt-signal"].pooled
    assert sig["ic"] > 0.2 and sig["ic_ci_low"] > 0 and sig["rank_ic"] > 0.2
    assert sig["icir"] > 0 and sig["ic_days"] >= 6
    assert {"sharpe_ES", "sharpe_ZN"} <= set(sig)
    assert sig["n_bars"] == sum(f.metrics["n_bars"] for f in res.candidates["foxhunt-signal"].folds)
    assert sig["ci_level"] == pytest.approx(bonferroni_level(len(cands)))


def test_a_fold_is_built_after_the_previous_fold_is_released(signal_pool, monkeypatch):
    """Issue 41: the last folds' train parts are most of the history; two at once doubled a
    year's peak memory."""
    import gc
    import weakref

    import models.evaluation.walk_forward as wf

    built: list[weakref.ref] = []
    real = wf.fold_data

    def watched(*args, **kwargs):
        gc.collect()
        alive = [r for r in built if r() is not None]
        assert not alive, f"{len(alive)} earlier fold(s) still held while building the next"
        data = real(*args, **kwargs)
        built.append(weakref.ref(data))
        return data

    monkeypatch.setattr(wf, "fold_data", watched)
    walk_forward(signal_pool, [climatology_candidate()], CFG, bootstrap=50)
    assert len(built) == 3


def test_no_skill_on_noise_at_the_adjusted_level(noise_pool):
    res = walk_forward(noise_pool, [signal_forecaster(), *trading_baselines((1,))], CFG,
                       n_compared=9, bootstrap=200)
    for r in res.candidates.values():
        assert not (r.pooled["sharpe_ci_low"] > 0), r.name
    assert not res.candidates["foxhunt-signal"].pooled["ic_ci_low"] > 0


def test_protocol_id_changes_with_costs_folds_and_data(signal_pool, noise_pool):
    cands = trading_baselines(())
    a = walk_forward(signal_pool, cands, CFG, bootstrap=20)
    assert walk_forward(signal_pool, cands, CFG, bootstrap=20).protocol_id == a.protocol_id
    assert walk_forward(signal_pool, cands, CFG, bootstrap=20,
                        cost_multiplier=2.0).protocol_id != a.protocol_id
    assert walk_forward(signal_pool, cands, WalkForwardConfig(folds=2, test_days=2),
                        bootstrap=20).protocol_id != a.protocol_id
    assert walk_forward(noise_pool, cands, CFG, bootstrap=20).protocol_id != a.protocol_id
    # known before anything is trained, so scored baselines can be skipped
    assert protocol_id_for(signal_pool, CFG, n_compared=len(cands), bootstrap=20) == a.protocol_id


def test_forecasters_trade_the_forecast_at_the_decision_horizon(signal_pool):
    """A drift that pays over the horizon but not over one bar: the last horizon's median
    clears the cost, the first one's does not. It trades by default (decision horizon =
    the dataset's horizon) and not with decision_horizon=1; the rule is in the protocol."""
    def fit(train):
        def predict(d):
            t = d.splits["test"]
            rows = decision_rows(t.window_starts, d.lookback)
            cost = d.cost_log_return("test")[rows] / d.target_scale
            sign = np.where(np.asarray(t.observed[rows, 0]) > 0, 1.0, -1.0)
            per_h = np.linspace(0.5, 3.0, d.horizon)  # x cost: only the last clears it
            med = sign[:, None] * cost[:, None] * per_h[None, :]
            return med[:, :, None] + np.linspace(-1, 1, len(d.meta["quantiles"]))[None, None]
        return predict
    cand = [Candidate("foxhunt-drift", "forecaster", fit)]
    default = walk_forward(signal_pool, cand, CFG, bootstrap=10)
    one_bar = walk_forward(signal_pool, cand, CFG, bootstrap=10, decision_horizon=1)
    assert default.candidates["foxhunt-drift"].pooled["n_trades"] > 0
    assert one_bar.candidates["foxhunt-drift"].pooled["n_trades"] == 0
    assert default.protocol["decision_horizon"] == HORIZON
    assert one_bar.protocol["decision_horizon"] == 1
    assert one_bar.protocol_id != default.protocol_id
    assert protocol_id_for(signal_pool, CFG, n_compared=1, bootstrap=10,
                           decision_horizon=1) == one_bar.protocol_id
    with pytest.raises(WalkForwardError, match=r"decision_horizon=3 is outside .*1\.\.2"):
        walk_forward(signal_pool, cand, CFG, bootstrap=10, decision_horizon=3)


def test_forecasters_hold_inside_the_band_until_the_forecast_turns(signal_pool):
    """A forecast that clears the cost once, then stays inside the band with the same sign:
    the position is kept (one trade per run of one sign), not left and re-entered; the rule
    is in the protocol."""
    def fit(train):
        def predict(d):
            t = d.splits["test"]
            rows = decision_rows(t.window_starts, d.lookback)
            cost = d.cost_log_return("test")[rows] / d.target_scale
            sign = np.where((np.arange(rows.size) // 40) % 2 == 0, 1.0, -1.0)
            size = np.where(np.arange(rows.size) % 40 == 0, 2.0, 0.5)  # x cost
            med = np.repeat((sign * cost * size)[:, None], d.horizon, axis=1)
            return med[:, :, None] + np.linspace(-1, 1, len(d.meta["quantiles"]))[None, None]
        return predict
    cand = [Candidate("foxhunt-band", "forecaster", fit)]
    result = walk_forward(signal_pool, cand, CFG, bootstrap=10)
    bars = result.candidates["foxhunt-band"].bars
    assert np.mean(bars.positions != 0) > 0.8  # the symmetric band would hold 1 bar in 40
    assert result.candidates["foxhunt-band"].pooled["n_trades"] < bars.positions.size / 30
    assert result.protocol["forecaster_rule"] == {"rule": "band", "enter_cost_multiple": 1.0,
                                                  "exit": "sign change"}
    assert walk_forward(signal_pool, cand, CFG, bootstrap=10,
                        threshold_k=2.0).protocol_id != result.protocol_id


def test_a_failing_fold_names_itself(signal_pool):
    def fit(train):
        if train.meta["fold"]["number"] == 2:
            raise RuntimeError("diverged")
        return lambda d: np.zeros(d.splits["test"].n_windows)
    with pytest.raises(WalkForwardError, match=r"fold 2 \(.*\): broken failed: diverged"):
        walk_forward(signal_pool, [Candidate("broken", "positions", fit)], CFG, bootstrap=10)


class _StandInLightGBM:
    """Stand-in for ``models.lightgbm.model``'s fitted model: the same interface, a per-horizon linear fit on f_0 instead of boosted trees."""

    def __init__(self, data):
        self.inner = signal_forecaster().fit(data)
        self.calls = 0

    def predict(self, split):
        self.calls += 1
        holder = types.SimpleNamespace(splits={"test": split}, lookback=LOOKBACK, horizon=HORIZON)
        return self.inner(holder)


def test_lightgbm_is_scored_on_the_same_folds(signal_pool, monkeypatch):
    fits = []

    def fit(data, config):
        fits.append((data.meta["fold"]["number"], config.seed))
        return _StandInLightGBM(data)

    # the function ``lightgbm_candidate`` fits with, where it looks it up
    monkeypatch.setattr(candidates.lightgbm_model, "fit", fit)
    lgb = lightgbm_candidate(LightGBMConfig(seed=7))
    assert lgb.name == "foxhunt-lightgbm"
    res = walk_forward(signal_pool, [lgb, signal_forecaster()], CFG, bootstrap=50)
    assert fits == [(1, 7), (2, 7), (3, 7)]  # retrained from scratch on each fold
    got = res.candidates["foxhunt-lightgbm"]
    assert [f.metrics["n_bars"] for f in got.folds] == \
        [f.metrics["n_bars"] for f in res.candidates["foxhunt-signal"].folds]
    assert got.pooled["ic"] > 0.2


def test_a_partial_last_session_joins_the_previous_date():
    per_row = ["d1"] * 100 + ["d2"] * 100 + ["d3"] * 100 + ["d4"] * 100 + ["d5"] * 20
    folds = plan_folds(per_row, WalkForwardConfig(folds=2, test_days=1))
    assert folds[-1].test_dates == ("d4", "d5") and folds[0].test_dates == ("d3",)


def test_a_model_that_repeats_a_baseline_is_named_after_it(signal_pool):
    """Always long is buy-and-hold, a forecaster returning the train climatology is the
    climatology; both are found even when those baselines are not among the candidates (an
    evaluation that reuses baselines scored earlier). A model of its own equals nothing."""
    from models.climatology import climatology_quantiles
    from models.evaluation.baselines import climatology_forecast

    def always_long(_train):
        return lambda d: np.ones(d.splits["test"].n_windows)

    def climatology_in_disguise(train):
        clim = climatology_quantiles(train, list(train.meta["quantiles"]))
        return lambda d: climatology_forecast(clim, d.splits["test"].n_windows)

    res = walk_forward(signal_pool, [Candidate("foxhunt-long", "positions", always_long),
                                     Candidate("foxhunt-ensemble", "forecaster",
                                               climatology_in_disguise),
                                     signal_forecaster()], CFG, bootstrap=20)
    assert res.candidates["foxhunt-long"].equals == "baseline:buy_and_hold"
    assert res.candidates["foxhunt-ensemble"].equals == "baseline:climatology"
    assert res.candidates["foxhunt-signal"].equals is None
    assert set(res.candidates) == {"foxhunt-long", "foxhunt-ensemble", "foxhunt-signal"}


def test_the_test_period_grows_with_the_history_not_the_retrainings():
    """A year is judged on months of test dates with the profile's number of folds; a short
    history keeps the profile's test days; the cap holds."""
    cfg = WalkForwardConfig(folds=3, test_days=2, validation_days=1)
    year = plan_folds([f"d{i:03d}" for i in range(179)], cfg)  # 250 calendar days of CME
    assert len(year) == 3 and sum(len(f.test_dates) for f in year) == 60
    assert year[-1].test_dates[-1] == "d178" and year[0].test_dates[0] == "d119"
    assert all(f.test_dates[0] > f.validation_dates[-1] for f in year)
    short = plan_folds([f"d{i:02d}" for i in range(14)], cfg)
    assert [len(f.test_dates) for f in short] == [2, 2, 2]
    fixed = plan_folds([f"d{i:03d}" for i in range(179)],
                       WalkForwardConfig(folds=3, test_days=2, test_fraction=0.0))
    assert sum(len(f.test_dates) for f in fixed) == 6
    capped = WalkForwardConfig(folds=3, test_days=2, max_test_days=30)
    assert capped.fold_test_days(179) == 10 and capped.fold_test_days(5000) == 10
    with pytest.raises(WalkForwardError, match="test_fraction"):
        WalkForwardConfig(test_fraction=1.0)
