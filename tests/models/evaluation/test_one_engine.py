"""One evaluation engine: the production model's test-split report and the walk-forward take
their naive baselines from one construction (``candidates.naive_baselines``), so on the same
bars both paths give each baseline the same name, positions, pnl and forecasts."""

import numpy as np
import pytest

from models.evaluation.candidates import (
    BASELINE_PREFIX,
    climatology_candidate,
    naive_baselines,
    trading_baselines,
)
from models.evaluation.evaluate import evaluate_agent, evaluate_forecaster
from models.evaluation.walk_forward import Fold, default_references, score_fold
from tests.model_data import synthetic_training_data
from tests.models.evaluation.test_evaluation import LinearOnSignal

LOOKBACKS = (1, 3)
FAST = {"latency_calls": 0, "bootstrap": 50, "seed": 0, "make_plots": False,
        "momentum_lookbacks": LOOKBACKS}
FOLD = Fold(1, ("train",), ("validation",), ("test",))  # score_fold names it in errors only


@pytest.fixture(scope="module")
def data():
    return synthetic_training_data(signal=0.5, seed=12)


def _agent(data, tmp_path, cost_multiplier: float = 1.0):
    flat = np.zeros(data.splits["test"].n_windows)
    return evaluate_agent("a", flat, data, out_dir=tmp_path, cost_multiplier=cost_multiplier,
                          **FAST)


def test_both_paths_name_the_baselines_alike(data, tmp_path):
    names = [c.name for c in naive_baselines(LOOKBACKS)]
    assert names == ["baseline:flat", "baseline:buy_and_hold", "baseline:momentum_1",
                     "baseline:momentum_3", "baseline:climatology"]
    assert all(n.startswith(BASELINE_PREFIX) for n in names)
    assert [c.name for c in default_references()] == [c.name for c in naive_baselines((1,))]
    fc = evaluate_forecaster("m", LinearOnSignal(0.5), data, out_dir=tmp_path, **FAST)
    assert list(fc.baselines) == names and list(fc.equity) == ["m", *names]
    assert list(_agent(data, tmp_path).baselines) == names[:-1]  # an agent: no forecast
    for n in names:
        assert f"| {n} |" in fc.markdown


@pytest.mark.parametrize("cost_multiplier", [0.0, 1.0])
def test_the_report_trades_each_baseline_as_the_walk_forward_does(data, tmp_path,
                                                                   cost_multiplier):
    rep = _agent(data, tmp_path, cost_multiplier)
    for c in trading_baselines(LOOKBACKS):
        wf = score_fold(c, data, FOLD, cost_multiplier=cost_multiplier)
        np.testing.assert_array_equal(rep.equity[c.name], np.cumsum(wf.pnl), err_msg=c.name)
        m = rep.baselines[c.name]
        assert m["n_trades"] == wf.n_trades and m["turnover"] == wf.turnover, c.name
        assert m["exposure"] == float(np.abs(wf.positions).mean()), c.name


def test_the_report_forecasts_the_walk_forwards_climatology(data, tmp_path):
    rep = evaluate_forecaster("m", LinearOnSignal(0.5), data, out_dir=tmp_path, **FAST)
    wf = score_fold(climatology_candidate(), data, FOLD)
    assert wf.quantile_metrics
    for k, v in wf.quantile_metrics.items():
        assert rep.baselines["baseline:climatology"][k] == v, k
