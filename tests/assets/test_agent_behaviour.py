"""The agents' behaviour report reads the validation rows the agent was validated on (its
``val_rows`` budget), not a year's whole validation split (issue 41)."""

from __future__ import annotations

import numpy as np

import assets.common.interpretability as interpretability
from models.agents.behaviour import Behaviour
from tests.model_data import synthetic_training_data


class _Run:
    def __init__(self) -> None:
        self.artifacts: list[str] = []

    def log_artifact(self, path, where) -> None:
        self.artifacts.append(str(path))

    def log_metrics(self, metrics) -> None:
        pass


def _report(tmp_path, monkeypatch, rows):
    data = synthetic_training_data(n_rows={"train": 200, "validation": 300, "test": 60},
                                   n_observed=3, n_known=2, n_static=2, lookback=8, horizon=2,
                                   seed=1)
    seen = []
    titles = []

    def fake_behaviour(policy, d, split):
        seen.append(np.asarray(d.splits[split].ts_event))
        return Behaviour({"short": 0.2, "flat": 0.5, "long": 0.3}, {14: 0.1}, {14: 10}, 10, split)

    monkeypatch.setattr(interpretability, "load_policy", lambda path: object())
    monkeypatch.setattr(interpretability, "behaviour", fake_behaviour)
    import models.evaluation.interpretation_plots as plots
    real = plots.agent_behaviour
    monkeypatch.setattr(plots, "agent_behaviour",
                        lambda path, *a, title, **k: titles.append(title) or real(path, *a, title=title, **k))
    run = _Run()
    md = interpretability.agent_behaviour(run, "dqn", tmp_path / "policy", data, tmp_path / "out",
                                          rows=rows)
    return data, seen[0], titles[0], md, run


def test_the_behaviour_report_reads_the_rows_the_agent_was_validated_on(tmp_path, monkeypatch):
    data, ts, title, md, run = _report(tmp_path, monkeypatch, rows=100)
    whole = np.asarray(data.splits["validation"].ts_event)
    assert ts.size == 100 and np.isin(ts, whole).all()
    assert np.sort(ts)[0] >= np.sort(whole)[-100 - 1]  # the most recent rows
    assert "last 100 rows of the validation split" in title
    assert md["action_shares"] and len(run.artifacts) == 2


def test_a_split_within_the_budget_is_reported_whole(tmp_path, monkeypatch):
    data, ts, title, _, _ = _report(tmp_path, monkeypatch, rows=None)
    assert ts.size == data.splits["validation"].n_rows
    assert "on the validation split" in title
