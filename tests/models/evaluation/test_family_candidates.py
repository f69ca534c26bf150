"""The model families as walk-forward candidates: a fresh DQN and a fresh TFT per fold, scored
on the same bars as the baselines (tiny sizes: this checks the wiring, not skill)."""

import numpy as np
import pytest

from models.agents.train import DQNConfig, train_dqn
from models.evaluation.candidates import trading_baselines
from models.evaluation.family_candidates import (
    agent_candidate,
    fold_forecaster,
    forecaster_candidate,
)
from models.evaluation.row_pool import row_pool
from models.evaluation.walk_forward import WalkForwardConfig, walk_forward
from models.training.loop import TrainConfig
from models.windows import DEFAULT_QUANTILES
from tests.model_data import synthetic_training_data

pytestmark = pytest.mark.usefixtures("one_torch_thread")
SIX_HOURS = 6 * 3600 * 10**9


def test_each_family_trains_per_fold_and_is_scored_on_the_baselines_bars():
    data = synthetic_training_data(n_rows={"train": 1800, "validation": 500, "test": 500},
                                   n_observed=3, n_known=2, n_static=2, lookback=8, horizon=2,
                                   signal=0.4, segment_length=300, seed=5)
    pool = row_pool(data, lambda ts: np.asarray(ts) // SIX_HOURS)
    tft_config = {"n_static": 2, "n_observed": 3, "n_known": 2, "lookback": 8, "horizon": 2,
                  "quantiles": list(DEFAULT_QUANTILES), "hidden": 8, "heads": 1,
                  "lstm_layers": 1, "var_width": 2, "dropout": 0.0}
    tft_train = TrainConfig(epochs=1, batch_size=32, max_batches_per_epoch=3, max_val_batches=2)
    seen = []  # the train splits the agent's forecaster was fitted on

    def tft_of_fold(train):
        seen.append(int(np.asarray(train.splits["train"].ts_event).max()))
        return fold_forecaster("tft", tft_config, tft_train)(train)

    dqn = agent_candidate("foxhunt-dqn", train_dqn, DQNConfig(
        total_timesteps=300, learning_starts=100, buffer_size=1000, batch_size=32, eval_freq=0,
        net_arch=[8], encoder_hidden=8, device="cpu"), forecasters={"tft": tft_of_fold})
    tft = forecaster_candidate("foxhunt-tft", "tft", tft_config, tft_train)
    res = walk_forward(pool, [dqn, tft, *trading_baselines(())],
                       WalkForwardConfig(folds=2, test_days=1), bootstrap=20)
    flat = [f.metrics["n_bars"] for f in res.candidates["baseline:flat"].folds]
    for name in ("foxhunt-dqn", "foxhunt-tft"):
        r = res.candidates[name]
        assert [f.metrics["n_bars"] for f in r.folds] == flat, name
        assert set(np.unique(r.bars.positions)) <= {-1.0, 0.0, 1.0}
    assert np.isnan(res.candidates["foxhunt-dqn"].pooled.get("ic", np.nan))  # no forecast
    assert np.isfinite(res.candidates["foxhunt-tft"].pooled["pinball_mean"])
    # the agent observed a forecaster trained on each fold's train split, before its test
    assert len(seen) == 2
    for fold, last_train in zip(res.folds, seen, strict=True):
        assert last_train < res.candidates["foxhunt-dqn"].folds[fold.number - 1].test_start_ns


def test_the_ensemble_refits_its_weights_on_each_folds_validation_split():
    """Two fixed members: one that knows the validation and test targets, one that is pure
    noise. Each fold's weights come from that fold's validation split, so the ensemble puts
    (almost) all weight on the informed member and forecasts as well as it does."""
    from models.evaluation.candidates import Candidate
    from models.evaluation.family_candidates import ensemble_candidate
    from models.training.loop import scaled_targets

    data = synthetic_training_data(n_rows={"train": 900, "validation": 300, "test": 300},
                                   lookback=8, horizon=2, segment_length=300, seed=9)
    pool = row_pool(data, lambda ts: np.asarray(ts) // SIX_HOURS)
    qs = np.asarray(DEFAULT_QUANTILES)
    spread = (qs - 0.5)[None, None, :] * 0.1
    seen_validation = []

    def informed(train):
        seen_validation.append(train.splits["validation"].n_windows)
        return lambda d: scaled_targets(d.window_dataset("test"))[:, :, None] + spread

    def noise(train):
        rng = np.random.default_rng(0)
        return lambda d: rng.normal(size=(d.splits["test"].n_windows, d.horizon, 1)) + spread

    members = {"good": Candidate("good", "forecaster", informed),
               "noise": Candidate("noise", "forecaster", noise)}
    ens = ensemble_candidate("foxhunt-ensemble", members, include_climatology=True)
    res = walk_forward(pool, [ens, members["good"], members["noise"]],
                       WalkForwardConfig(folds=2, test_days=1), bootstrap=20)
    pinball = {n: res.candidates[n].pooled["pinball_mean"] for n in ("foxhunt-ensemble", "good",
                                                                     "noise")}
    assert pinball["foxhunt-ensemble"] < 0.2 * pinball["noise"], pinball
    assert pinball["foxhunt-ensemble"] <= 1.05 * pinball["good"], pinball
    # the members were fitted once per fold for the ensemble (and once for themselves), each
    # time on a fold with a validation split
    assert len(seen_validation) == 4 and min(seen_validation) > 0


def _tiny_tft():
    """A small dataset, a tiny TFT's config and a two-batch training on it."""
    data = synthetic_training_data(n_rows={"train": 600, "validation": 200, "test": 200},
                                   n_observed=4, n_known=2, n_static=1, lookback=8, horizon=2,
                                   seed=3)
    config = {"n_static": 1, "n_observed": 4, "n_known": 2, "lookback": 8, "horizon": 2,
              "quantiles": list(DEFAULT_QUANTILES), "hidden": 8, "heads": 1,
              "lstm_layers": 1, "var_width": 2, "dropout": 0.0}
    return data, config, TrainConfig(epochs=1, batch_size=32, max_batches_per_epoch=2,
                                     max_val_batches=1)


def test_a_cached_fold_model_is_reused_not_retrained(tmp_path, monkeypatch):
    """The ensemble's walk-forward fits its members on the same folds the members' own
    walk-forward did: with a cache directory the second fit loads the first one's model."""
    import models.evaluation.family_candidates as family_candidates

    data, config, train = _tiny_tft()
    calls = []
    real = family_candidates.train_forecaster
    monkeypatch.setattr(family_candidates, "train_forecaster", lambda *a, **k: calls.append(1) or real(*a, **k))
    make = lambda cfg: forecaster_candidate("foxhunt-tft", "tft", cfg, train,  # noqa: E731
                                            cache_dir=tmp_path)
    first = make(config).fit(data)(data)
    again = make(config).fit(data)(data)
    assert len(calls) == 1 and np.array_equal(first, again)
    make({**config, "hidden": 12}).fit(data)  # another configuration: trained
    assert len(calls) == 2


def test_fold_model_key_is_the_same_with_defaults_spelled_out_or_left_out():
    """Regression: the tft_model checkpoint's config lists every field, the asset's dict only
    those it sets; the two keys differed, so the agents' walk-forward retrained every fold
    forecaster that the forecasters' own walk-forward had already trained."""
    from models.evaluation.family_candidates import fold_model_key
    from models.tft.model import TFTConfig

    data = synthetic_training_data(n_rows={"train": 200, "validation": 60, "test": 60},
                                   n_observed=3, n_known=2, n_static=2, lookback=8, horizon=2,
                                   seed=2)
    short = {"n_static": 2, "n_observed": 3, "n_known": 2, "lookback": 8, "horizon": 2,
             "hidden": 8, "heads": 1, "output_scale_input": 0}
    full = TFTConfig.from_dict(short).to_dict()
    assert set(full) > set(short)
    train = TrainConfig(epochs=1)
    assert fold_model_key("tft", short, train, data) == fold_model_key("tft", full, train, data)
    assert fold_model_key("tft", {**short, "hidden": 16}, train, data) != \
        fold_model_key("tft", short, train, data)


def test_a_fold_models_test_forecasts_are_read_back_by_the_next_process(tmp_path, monkeypatch):
    """Issue 41: the ensemble's and the agents' walk-forwards forecast the test rows with
    the very fold models the forecasters' evaluations used; within ``forecast_memo.on_disk``
    another process reads those forecasts instead of running the models over a year's test
    period, and an agent's state is exactly the forecaster's fold forecasts."""
    import models.agents.state as state
    from models.agents import forecast_memo

    data, config, train = _tiny_tft()
    calls = []
    real = state._forecasts
    monkeypatch.setattr(state, "_forecasts", lambda *a, **k: calls.append(1) or real(*a, **k))
    make = lambda: forecaster_candidate("foxhunt-tft", "tft", config, train,  # noqa: E731
                                        cache_dir=tmp_path / "fold_models")
    forecast_memo.forget()
    with forecast_memo.on_disk(tmp_path / "forecasts"):
        first = make().fit(data)(data)
        forecast_memo.forget()  # another process: nothing in memory
        again = make().fit(data)(data)
        forecast_memo.forget()
        model = _cached_fold_model(tmp_path / "fold_models", config, train, data)
        agent_state = state.ForecastState.for_data({"tft": model}, data).compute(data, "test")
    forecast_memo.forget()
    assert len(calls) == 1
    np.testing.assert_array_equal(first, again)
    assert first.shape == (data.splits["test"].n_windows, 2, len(DEFAULT_QUANTILES))
    ends = np.asarray(data.splits["test"].window_starts) + data.lookback - 1
    width = 2 * len(DEFAULT_QUANTILES)
    np.testing.assert_array_equal(agent_state[ends, :width], first.reshape(len(ends), width))


def _cached_fold_model(cache_dir, config, train, data):
    """The fold model the forecaster candidate trained (read back from its cache)."""
    from models.evaluation.family_candidates import fold_forecaster

    return fold_forecaster("tft", config, train, cache_dir=cache_dir)(data)
