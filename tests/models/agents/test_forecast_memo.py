"""The same weights on the same rows are forecast once per process, and only then."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from models.agents import forecast_memo
from models.agents.state import forecasts
from tests.model_data import synthetic_training_data

from .test_forecast_state import H, L, tiny_forecaster

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def data():
    forecast_memo.forget()
    yield synthetic_training_data(n_rows={"train": 300, "validation": 100, "test": 100},
                                  n_observed=4, n_known=2, n_static=2, lookback=L, horizon=H,
                                  segment_length=100, seed=3)
    forecast_memo.forget()


def _counting(model):
    calls = []
    model.register_forward_hook(lambda *_: calls.append(1))
    return calls


def _first_forecast(data):
    """A counted model and its first forecasts of the train split (computed: calls > 0)."""
    model = tiny_forecaster(data)
    calls = _counting(model)
    part = data.splits["train"]
    first = forecasts(model, part, L, H)
    assert calls and np.isfinite(first).any()
    return model, calls, part, first


def test_a_repeat_is_not_computed_and_equals_the_first(data):
    model, calls, part, first = _first_forecast(data)
    n = len(calls)
    again = forecasts(model, part, L, H)
    assert len(calls) == n
    np.testing.assert_array_equal(again, first)
    again[:] = 0.0  # the caller's copy; what is kept stays intact
    np.testing.assert_array_equal(forecasts(model, part, L, H), first)
    # an equal model with its own weights (another fold object, the same checkpoint) hits too
    twin = tiny_forecaster(data)
    twin_calls = _counting(twin)
    np.testing.assert_array_equal(forecasts(twin, part, L, H), first)
    assert not twin_calls


def test_other_weights_rows_or_sizes_are_computed(data):
    model, calls, part, first = _first_forecast(data)
    n = len(calls)
    with torch.no_grad():
        model.head.proj.bias.add_(0.5)
    changed = forecasts(model, part, L, H)
    assert len(calls) > n and not np.allclose(np.nan_to_num(changed), np.nan_to_num(first))
    n = len(calls)
    observed = np.array(part.observed)
    observed[50] += 1.0
    forecasts(model, dataclasses.replace(part, observed=observed), L, H)
    assert len(calls) > n
    n = len(calls)
    forecasts(model, part, L, H, batch_size=64)
    assert len(calls) > n


def test_only_the_newest_entries_are_kept(data, monkeypatch):
    monkeypatch.setattr(forecast_memo, "MAX_ENTRIES", 2)
    model = tiny_forecaster(data)
    calls = _counting(model)
    for split in ("train", "validation", "test"):
        forecasts(model, data.splits[split], L, H)
    n = len(calls)
    forecasts(model, data.splits["test"], L, H)
    assert len(calls) == n
    forecasts(model, data.splits["train"], L, H)  # the oldest was dropped
    assert len(calls) > n


def test_on_disk_another_process_reads_what_one_computed(data, tmp_path):
    """Issue 41: dqn_evaluation and ppo_evaluation run in separate processes and observe the
    same fold forecasters on the same rows; within ``on_disk`` the second reads the first's
    forecasts from the file instead of running the forecasters again."""
    with forecast_memo.on_disk(tmp_path):
        model, calls, part, first = _first_forecast(data)
    files = list(tmp_path.glob("*.npy"))
    assert len(files) == 1
    forecast_memo.forget()  # a new process: nothing in memory
    twin = tiny_forecaster(data)
    twin_calls = _counting(twin)
    forecasts(twin, part, L, H)  # outside the block: computed
    assert twin_calls
    forecast_memo.forget()
    n = len(twin_calls)
    with forecast_memo.on_disk(tmp_path):
        again = forecasts(twin, part, L, H)
    assert len(twin_calls) == n
    np.testing.assert_array_equal(again, first)
    assert not list(tmp_path.glob(".*"))  # no temp file left beside the entry


def test_on_disk_an_unreadable_file_is_computed_again(data, tmp_path):
    with forecast_memo.on_disk(tmp_path):
        model, calls, part, first = _first_forecast(data)
        (entry,) = tmp_path.glob("*.npy")
        entry.write_bytes(b"torn")
        forecast_memo.forget()
        n = len(calls)
        np.testing.assert_array_equal(forecasts(model, part, L, H), first)
        assert len(calls) > n
        np.testing.assert_array_equal(np.load(entry), first)  # rewritten whole


def test_memory_holds_at_most_max_bytes_but_the_newest(data, monkeypatch):
    model = tiny_forecaster(data)
    calls = _counting(model)
    one = forecasts(model, data.splits["validation"], L, H).nbytes
    monkeypatch.setattr(forecast_memo, "MAX_BYTES", one + 1)  # room for one entry
    forecasts(model, data.splits["test"], L, H)
    assert len(forecast_memo._kept) == 1  # the newest only
    n = len(calls)
    forecasts(model, data.splits["test"], L, H)
    assert len(calls) == n
