"""tft_model as an asset on a dataset in the real format: one process, and data-parallel under
torchrun through Dagster Pipes (nproc_per_node=2, gloo); both publish a checkpoint and an
MLflow version that evaluation can load."""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
import numpy as np
import pytest
import torch

from assets.training import tft_model
from foxhunt_pipeline.config.paths import FoxhuntPaths
from models.export import load_artifact
from models.training.checkpoint import load_checkpoint
from resources.mlflow_tracking import MLflowResource
from resources.pipes import build_pipes_subprocess_client
from resources.storage import FoxhuntStorage
from resources.torch_device import TorchDevice
from tests.model_data import synthetic_training_data


def _resources(paths: FoxhuntPaths) -> dict:
    return {
        "storage": FoxhuntStorage(home=str(paths.home)), "mlflow": MLflowResource(home=str(paths.home)),
        "torch_device": TorchDevice(prefer="cpu", threads=1),
        "pipes_subprocess_client": build_pipes_subprocess_client(),
    }


@pytest.mark.parametrize("nproc", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_tft_model_trains_publishes_and_registers(foxhunt_home, nproc):
    paths = FoxhuntPaths.from_env().ensure()
    synthetic_training_data({"train": 1200, "validation": 400, "test": 400}).save(
        paths.warehouse / "training_dataset")
    config = {"epochs": 2, "max_batches_per_epoch": 5, "hidden": 8, "heads": 2, "lstm_layers": 1,
              "var_width": 2, "batch_size": 32, "nproc_per_node": nproc}
    res = dg.materialize([tft_model], resources=_resources(paths),
                         run_config={"ops": {"tft_model": {"config": config}}})
    assert res.success
    meta = res.asset_materializations_for_node("tft_model")[0].metadata
    assert meta["epochs"].value == 2
    assert meta["mlflow_run"].value.endswith(f"/runs/{meta['mlflow_run_id'].value}")
    pointer = json.loads((paths.checkpoints / "tft" / "current.json").read_text())
    model, ck = load_checkpoint(pointer["checkpoint"])
    assert model.config.hidden == 8
    versions = MLflowResource(home=str(paths.home)).client().search_model_versions("name='foxhunt-tft'")
    assert [v.tags.get("precision") for v in versions] == ["fp32"]
    # registered as an MLflow pyfunc model around the exported artifact, with a model card
    assert meta["model_uri"].value == f"models:/foxhunt-tft/{versions[0].version}"
    assert "lookback / horizon" in versions[0].description and "best_val_loss" in versions[0].description
    run_artifacts = MLflowResource(home=str(paths.home)).client().get_run(meta["mlflow_run_id"].value).info.artifact_uri
    model_dir = Path(run_artifacts.removeprefix("file://")) / "model"
    assert (model_dir / "MLmodel").exists() and list(model_dir.glob("artifacts/*/meta.json"))
    # the loss curve is an image on the asset page, not a path
    assert meta["loss_curve"].value.startswith("![tft loss curve](data:image/png;base64,")
    # interpretability: plots inline on the asset page and logged to the MLflow run
    assert "data:image/png;base64," in meta["variable_importance"].value
    assert "data:image/png;base64," in meta["attention"].value
    logged = [f.path for f in MLflowResource(home=str(paths.home)).client().list_artifacts(
        meta["mlflow_run_id"].value, "interpretability")]
    assert any("importance" in p and p.endswith(".png") for p in logged)
    assert any("attention" in p for p in logged) and any(p.endswith(".csv") for p in logged)
    assert meta["profile"].value == os.environ["FOXHUNT_PROFILE"] == "fast"  # set by conftest


def test_mlflow_run_link_points_at_the_local_mlflow_ui(foxhunt_home, monkeypatch):
    monkeypatch.delenv("FOXHUNT_MLFLOW_UI_URL", raising=False)
    local = MLflowResource(home=str(foxhunt_home))
    url = local.run_url("abc123")
    assert url.startswith("http://127.0.0.1:5000/#/experiments/") and url.endswith("/runs/abc123")
    # `foxhunt ui` starts the MLflow UI next to Dagster and tells the code location where
    monkeypatch.setenv("FOXHUNT_MLFLOW_UI_URL", "http://127.0.0.1:3001")
    assert local.run_url("abc123").startswith("http://127.0.0.1:3001/#/experiments/")


def test_tft_model_of_two_members_trains_each_logs_both_and_registers_the_average(foxhunt_home):
    """A deep ensemble (``members: 2``): both members train (MLflow steps 1..4), the
    checkpoint holds both and the registered model's artifact serves their average."""
    paths = FoxhuntPaths.from_env().ensure()
    data = synthetic_training_data({"train": 1200, "validation": 400, "test": 400})
    data.save(paths.warehouse / "training_dataset")
    config = {"epochs": 2, "max_batches_per_epoch": 5, "hidden": 8, "heads": 2, "lstm_layers": 1,
              "var_width": 2, "batch_size": 32, "members": 2}
    res = dg.materialize([tft_model], resources=_resources(paths),
                         run_config={"ops": {"tft_model": {"config": config}}})
    assert res.success
    meta = res.asset_materializations_for_node("tft_model")[0].metadata
    assert meta["epochs"].value == 4  # 2 per member
    pointer = json.loads((paths.checkpoints / "tft" / "current.json").read_text())
    model, _ = load_checkpoint(pointer["checkpoint"])
    assert model.config.members == 2 and len(model.members) == 2
    client = MLflowResource(home=str(paths.home)).client()
    steps = [m.step for m in client.get_metric_history(meta["mlflow_run_id"].value, "val_loss")]
    assert sorted(steps) == [1, 2, 3, 4]
    assert "member" not in client.get_run(meta["mlflow_run_id"].value).data.metrics
    # the registered model's artifact is the average's export
    run_artifacts = client.get_run(meta["mlflow_run_id"].value).info.artifact_uri
    [artifact] = [p.parent for p in (Path(run_artifacts.removeprefix("file://")) / "model")
                  .glob("artifacts/*/meta.json")]
    served, _ = load_artifact(artifact)
    batch = data.window_dataset("test").batch(np.arange(3))
    inputs = (batch["static"], batch["observed"], batch["known"])
    with torch.no_grad():
        each = [m(*inputs) for m in model.members]
        assert torch.allclose(served(*inputs), (each[0] + each[1]) / 2, atol=1e-5)
