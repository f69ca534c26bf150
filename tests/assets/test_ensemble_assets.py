"""ensemble_model on two tiny trained forecasters: weights fitted on validation in its
metadata, a registered `foxhunt-ensemble` version, and ensemble_evaluation through the
single models' evaluation, so the leaderboard ranks it next to them."""

from __future__ import annotations

import dagster as dg
import polars as pl

from assets.ensemble import ensemble_evaluation, ensemble_model
from assets.evaluation import tft_evaluation
from assets.leaderboard import model_leaderboard
from assets.training import mamba2_model, tft_model
from foxhunt_pipeline.config.paths import FoxhuntPaths
from resources.mlflow_tracking import MLflowResource
from resources.pipes import build_pipes_subprocess_client
from resources.storage import EVALUATIONS_TABLE, FoxhuntStorage
from resources.torch_device import TorchDevice
from tests.model_data import synthetic_training_data

TINY = {"epochs": 1, "max_batches_per_epoch": 3, "hidden": 8, "batch_size": 32}


def test_ensemble_is_fitted_on_validation_registered_evaluated_and_ranked(foxhunt_home):
    paths = FoxhuntPaths.from_env().ensure()
    # 50 hours of train minutes and a day gap before validation and test: 5 trade dates, the
    # fast profile's 2 walk-forward folds x 1 test date
    synthetic_training_data({"train": 3000, "validation": 150, "test": 150}).save(
        paths.warehouse / "training_dataset")
    resources = {
        "storage": FoxhuntStorage(home=str(paths.home)), "mlflow": MLflowResource(home=str(paths.home)),
        "torch_device": TorchDevice(prefer="cpu", threads=1),
        "pipes_subprocess_client": build_pipes_subprocess_client(),
    }
    run_config = {"ops": {
        "tft_model": {"config": {**TINY, "heads": 2, "lstm_layers": 1, "var_width": 2}},
        "mamba2_model": {"config": {**TINY, "n_layers": 1}},
        "ensemble_model": {"config": {"val_windows": 40}},  # issue 41: a fixed sample
        "tft_evaluation": {"config": {"latency_calls": 0, "bootstrap": 50}},
        "ensemble_evaluation": {"config": {"latency_calls": 0, "bootstrap": 50}},
    }}
    res = dg.materialize([tft_model, mamba2_model, ensemble_model, tft_evaluation,
                          ensemble_evaluation, model_leaderboard], resources=resources, run_config=run_config)
    assert res.success
    meta = res.asset_materializations_for_node("ensemble_model")[0].metadata
    weights = meta["weights"].value
    assert meta["validation_windows"].value == 40
    assert set(weights) <= {"tft", "mamba2", "climatology"} and abs(sum(weights.values()) - 1) < 1e-9
    assert all(w >= 0 for w in weights.values())
    assert meta["val_loss"].value <= min(meta["val_loss_members"].value.values()) + 1e-12
    versions = resources["mlflow"].client().search_model_versions("name='foxhunt-ensemble'")
    assert [v.tags.get("precision") for v in versions] == ["fp32"]
    # registered as a pyfunc model, as the single forecasters are (not a bare checkpoint)
    import mlflow

    run_uri = resources["mlflow"].client().get_run(versions[0].run_id).info.artifact_uri
    info = mlflow.models.Model.load(run_uri.removeprefix("file://") + "/model")
    assert "python_function" in info.flavors and info.metadata["family"] == "ensemble"

    rows = resources["storage"].read_rows(EVALUATIONS_TABLE)
    pooled = rows.filter(pl.col("fold") == "pooled")
    ens = pooled.filter(pl.col("model") == "foxhunt-ensemble")
    assert ens.height == 1 and ens["pinball_mean"][0] is not None
    # walk-forward like the single forecasters: the same folds, baselines and test period
    assert sorted(rows.filter(pl.col("model") == "foxhunt-ensemble")["fold"]) == ["1", "2", "pooled"]
    assert ens["protocol_id"][0] == pooled.filter(pl.col("model") == "foxhunt-tft")["protocol_id"][0]
    single = pooled.filter(pl.col("model") == "foxhunt-tft")
    assert (ens["test_start"][0], ens["test_end"][0]) == (single["test_start"][0], single["test_end"][0])
    same = pooled.filter(pl.col("protocol_id") == ens["protocol_id"][0])
    assert {"baseline:flat", "baseline:buy_and_hold", "baseline:momentum_1",
            "baseline:climatology"} == set(same.filter(pl.col("family") == "baseline")["model"])
    assert same.filter(pl.col("family") == "baseline")["model"].is_unique().all()  # scored once
    # the ensemble's walk-forward reused tft_evaluation's fold models: one per fold for tft,
    # trained for the ensemble only for mamba2 (its evaluation was not materialized)
    cached = sorted(p.name.split("-")[0] for p in (paths.home / "scratch" / "cache" / "fold_models").iterdir())
    assert cached == ["mamba2", "mamba2", "tft", "tft"], cached
    board = (paths.table_dir("model_leaderboard") / "leaderboard.md").read_text()
    assert "foxhunt-ensemble" in board
