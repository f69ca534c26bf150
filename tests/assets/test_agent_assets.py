"""dqn_agent as an asset on a dataset built from a features table, deciding on the forecasts
of the tft_model and mamba2_model materialized beside it: it registers a pyfunc model that
acts on the table's rows (its forecasters travel with it), and shows how it behaves (action
shares, position by hour) as an image on the asset page."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import mlflow
import polars as pl
import pytest

from assets.agents import dqn_agent
from assets.common.training_configs import TFTTrainingConfig, train_config
from assets.quantization import dqn_quantized
from assets.training import mamba2_model, tft_model
from foxhunt_pipeline.config.paths import FoxhuntPaths
from foxhunt_pipeline.serving.loaded import LoadedModel
from models.agents.saved_config import saved_agent_config
from models.agents.state import saved_forecasters
from models.training.loop import TrainConfig
from resources.mlflow_tracking import MLflowResource
from resources.pipes import build_pipes_subprocess_client
from resources.storage import FoxhuntStorage
from resources.torch_device import TorchDevice
from tests.resources.pyfunc_fixtures import features_and_data, one_root

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_dqn_agent_registers_a_pyfunc_model_and_shows_its_behaviour(foxhunt_home, monkeypatch):
    paths = FoxhuntPaths.from_env().ensure()
    features, data = features_and_data()
    data.save(paths.warehouse / "training_dataset")
    table = paths.table_dir("features")
    table.mkdir(parents=True, exist_ok=True)
    features.write_parquet(table / "data.parquet")
    home = str(paths.home)
    small = {"epochs": 1, "max_batches_per_epoch": 3, "hidden": 8, "batch_size": 32}
    res = dg.materialize(
        [tft_model, mamba2_model, dqn_agent],
        resources={"storage": FoxhuntStorage(home=home), "mlflow": MLflowResource(home=home),
                   "torch_device": TorchDevice(prefer="cpu", threads=1),
                   "pipes_subprocess_client": build_pipes_subprocess_client()},
        run_config={"ops": {
            "tft_model": {"config": {**small, "heads": 2, "lstm_layers": 1, "var_width": 2}},
            "mamba2_model": {"config": {**small, "n_layers": 1}},
            "dqn_agent": {"config": {"total_timesteps": 300, "learning_starts": 50,
                                     "net_arch": [8], "eval_freq": 150}}}},
    )
    assert res.success
    # issue 41: its quantization replays the evaluation's report rows, not the whole test split
    quantized = dg.materialize(
        [dqn_quantized], resources={"storage": FoxhuntStorage(home=home),
                                    "mlflow": MLflowResource(home=home)},
        run_config={"ops": {"dqn_quantized": {"config": {"report_rows": 40,
                                                         "register_accepted": False}}}})
    report = json.loads(Path(quantized.asset_materializations_for_node("dqn_quantized")[0]
                             .metadata["report"].value).read_text())
    assert data.splits["test"].n_rows > 40
    assert report["rows"] and all(0 < r["eval_rows"] <= 40 for r in report["rows"])
    meta = res.asset_materializations_for_node("dqn_agent")[0].metadata
    assert meta["behaviour"].value.startswith("![dqn actions and mean position by hour](data:image/png;base64,")
    assert sum(meta["action_shares"].value.values()) == pytest.approx(1.0, abs=1e-3)
    assert meta["profile"].value == "fast"
    assert meta["observes"].value == "foxhunt-tft v1, foxhunt-mamba2 v1"
    # the forecasters beside the policy carry the training config they were trained with, so
    # the agent's walk-forward retrains them as their own walk-forward did (a shared cache)
    saved = saved_forecasters(Path(meta["policy"].value.rsplit("/", 1)[0]))
    assert TrainConfig.from_dict(saved["tft"]["train_config"]) == train_config(
        TFTTrainingConfig(**small, heads=2, lstm_layers=1, var_width=2))
    assert saved["mamba2"]["train_config"]["epochs"] == 1
    # and the agent's own training config, which its walk-forward retrains with
    agent = saved_agent_config(Path(meta["policy"].value.rsplit("/", 1)[0]))
    assert (agent["total_timesteps"], agent["net_arch"], agent["eval_freq"]) == (300, [8], 30)
    assert meta["episodes"].value >= 1
    curve = meta["validation_curve"].value.splitlines()
    # a validation backtest at least every 10% of the steps
    assert [line.split("|")[1].strip() for line in curve[2:]] == [str(30 * k) for k in range(1, 11)]
    uri = meta["model_uri"].value
    assert uri == "models:/foxhunt-dqn/1"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", MLflowResource(home=home).resolved_uri())
    got = pl.from_pandas(mlflow.pyfunc.load_model(uri).predict(one_root(features).to_pandas()))
    want = LoadedModel.load(meta["policy"].value.rsplit("/", 1)[0]).predict(one_root(features))
    assert got.height == want.height > 0
    assert got["action"].to_list() == want["action"].to_list()
    version = MLflowResource(home=home).client().get_model_version("foxhunt-dqn", "1")
    assert "final_val_mean_reward" in version.description and version.tags["profile"] == "fast"
