"""actions_frame: an agent read from the features table acts as evaluation replays it."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from foxhunt_pipeline.serving.actions import actions_frame, load_agent
from foxhunt_pipeline.serving.loaded import LoadedModel
from foxhunt_pipeline.serving.predict import PredictInputError
from models.agents.policy import load_policy
from models.agents.trading_env import evaluate_positions
from tests.resources.pyfunc_fixtures import agent_dir, features_and_data

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    features, data = features_and_data()
    return features, data, agent_dir("dqn", data, tmp_path_factory.mktemp("agent") / "dqn")


def test_actions_on_the_table_equal_the_evaluation_replay_of_the_test_split(agent):
    features, data, path = agent
    replay = evaluate_positions(load_policy(path), data, "test")
    split = data.splits["test"]
    roots = np.asarray(data.meta["roots"])[split.root_index[replay["rows"]]]
    want = pl.DataFrame({"ts_event": pl.Series(replay["ts"]).cast(pl.Datetime("ns", "UTC")), "root": roots,
                         "want": replay["positions"].astype(np.int8)})
    test_keys = pl.DataFrame({"ts_event": pl.Series(np.asarray(split.ts_event)).cast(pl.Datetime("ns", "UTC")),
                              "root": np.asarray(data.meta["roots"])[split.root_index]})
    rows = features.join(test_keys, on=["ts_event", "root"], how="semi")
    got = LoadedModel.load(path).predict(rows)
    assert set(got.columns) >= {"ts_event", "root", "contract_seq", "action", "position"}
    both = want.join(got, on=["ts_event", "root"], how="left")
    assert both["position"].null_count() == 0, "a row evaluation trades has no action"
    assert both["position"].to_list() == both["want"].to_list()
    assert len(set(both["position"].to_list())) >= 2  # the stand-in policy does change position
    assert (got["action"] - got["position"]).unique().to_list() == [1]


def test_actions_normalise_with_the_agents_own_stats(agent):
    """Raw table values, not the dataset's normalised ones: shifting a raw feature by its
    train mean must change decisions (the stats are applied), scaling the stats back undoes it."""
    features, data, path = agent
    act, meta = load_agent(path)
    base = actions_frame(act, meta, features)
    shifted = features.with_columns(pl.col("f_0") + 50.0 * meta["normalization"]["std"][0])
    assert actions_frame(act, meta, shifted)["action"].to_list() != base["action"].to_list()
    meta2 = {**meta, "normalization": {**meta["normalization"],
                                       "mean": [m + (50.0 * meta["normalization"]["std"][0] if i == 0 else 0)
                                                for i, m in enumerate(meta["normalization"]["mean"])]}}
    assert actions_frame(act, meta2, shifted)["action"].to_list() == base["action"].to_list()


def test_missing_feature_column_is_named(agent):
    features, _, path = agent
    with pytest.raises(PredictInputError, match="f_2"):
        LoadedModel.load(path).predict(features.drop("f_2"))
