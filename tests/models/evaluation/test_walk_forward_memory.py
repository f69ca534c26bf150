"""Issue 41: a walk-forward holds one fold's models at a time. An SB3 agent is a reference
cycle (model, policy, env, callbacks) that kept its replay buffer and its state's arrays
(a fold's test features: ~100 MB a year) alive until a full collection, so every fold's
agent was still in memory for the pooled bootstrap."""

from __future__ import annotations

import weakref

import numpy as np

from models.evaluation.candidates import Candidate, trading_baselines
from models.evaluation.row_pool import row_pool
from models.evaluation.walk_forward import WalkForwardConfig, walk_forward
from tests.model_data import synthetic_training_data


class _Cyclic:
    """What a fitted agent is to the collector: a cycle holding a big array."""

    def __init__(self, n: int) -> None:
        self.me = self
        self.buffer = np.ones(n)


def test_a_folds_cyclic_models_are_gone_before_the_next_fold_and_the_pooled_metrics():
    data = synthetic_training_data(n_rows={"train": 1200, "validation": 300, "test": 300},
                                   n_observed=3, n_known=2, n_static=2, lookback=8, horizon=2,
                                   segment_length=300, seed=5)
    pool = row_pool(data, lambda ts: np.asarray(ts) // (6 * 3600 * 10**9))
    fitted: list[weakref.ref] = []
    alive_at_fit: list[int] = []

    def fit(train):
        alive_at_fit.append(sum(r() is not None for r in fitted))
        model = _Cyclic(1000)
        fitted.append(weakref.ref(model))

        def predict(d):
            model.buffer.sum()
            return np.zeros(d.splits["test"].n_rows)
        model.predict = predict  # the cycle holds the closure too, as SB3's callbacks do
        return predict

    walk_forward(pool, [Candidate("cyclic", "positions", fit), *trading_baselines(())],
                 WalkForwardConfig(folds=3, test_days=1), bootstrap=10)
    assert alive_at_fit == [0, 0, 0]
    assert all(r() is None for r in fitted)
