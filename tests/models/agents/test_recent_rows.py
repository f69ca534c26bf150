"""The agents learn and validate on the most recent rows their budget can use: a longer
history costs them no more state to compute (``models.windows.recent_rows``)."""

from __future__ import annotations

import numpy as np

from models.windows import SplitArrays, TrainingData, recent_rows, valid_window_starts

LOOKBACK, HORIZON = 4, 2


def two_roots(n_per_root: int = 300) -> TrainingData:
    """Root 0 then root 1, each one segment, a row's value its position in the split."""
    n = 2 * n_per_root
    root = np.repeat([0, 1], n_per_root)
    targets = np.random.default_rng(0).standard_normal((n, HORIZON))
    part = SplitArrays(observed=np.arange(n, dtype=np.float32)[:, None],
                       known=np.zeros((n, 1), np.float32), static=np.zeros((n, 1), np.float32),
                       targets=targets, ts_event=np.tile(np.arange(n_per_root), 2) * 60,
                       segment=root.copy(), root_index=root,
                       window_starts=np.zeros(0, np.int64))
    part.window_starts = valid_window_starts(part.segment, part.targets, LOOKBACK, HORIZON)
    meta = {"lookback": LOOKBACK, "horizon": HORIZON, "cost_log_return": [1e-4, 2e-4]}
    return TrainingData(meta=meta, splits={"train": part, "validation": part})


def test_each_root_keeps_its_most_recent_rows_in_order():
    data = two_roots()
    cut = recent_rows(data, {"train": 100, "validation": None})
    train = cut.splits["train"]
    kept = train.observed[:, 0].astype(int).tolist()
    assert kept == list(range(250, 300)) + list(range(550, 600))  # 50 per root, in order
    assert train.root_index.tolist() == [0] * 50 + [1] * 50
    assert cut.splits["validation"] is data.splits["validation"]  # no limit: untouched
    np.testing.assert_array_equal(cut.cost_log_return("train"), [1e-4] * 50 + [2e-4] * 50)
    # every window lies inside one root's kept rows
    w = train.window_starts
    assert w.size and (train.segment[w] == train.segment[w + LOOKBACK + HORIZON - 1]).all()


def test_a_split_within_the_budget_is_the_same_object():
    data = two_roots(40)
    assert recent_rows(data, {"train": 80}).splits["train"] is data.splits["train"]


def test_training_sees_only_the_budgeted_rows():
    """``train_agent`` builds the agent (and computes its state) on the cut splits."""
    import pytest

    from models.agents.configs import DQNConfig
    from models.agents.learning import train_agent

    seen = {}

    class Built(Exception):
        pass

    def build(data, config, state):
        seen.update({k: v.n_rows for k, v in data.splits.items()})
        raise Built

    config = DQNConfig(observation="window", train_rows=120, val_rows=60)
    with pytest.raises(Built):
        train_agent("dqn", build, None, two_roots(), config, None, "validation", None, None)
    assert seen == {"train": 120, "validation": 60}
