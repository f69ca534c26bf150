"""tft_tuning with the fast profile: >= 5 trials in the SQLite study under FOXHUNT_HOME,
each an MLflow child run of the study's run; the next tft_model trains with the best
trial's parameters and says so."""

from __future__ import annotations

import json

import dagster as dg
import optuna

from assets.common.training_configs import TFTTrainingConfig
from assets.common.tuned_params import with_tuned_params
from assets.training import tft_model
from assets.tuning import tft_tuning
from foxhunt_pipeline.config.paths import FoxhuntPaths
from models.training.checkpoint import load_checkpoint
from models.tuning.study import open_study
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


def test_tft_tuning_runs_a_study_and_tft_model_uses_its_best_params(foxhunt_home):
    paths = FoxhuntPaths.from_env().ensure()
    synthetic_training_data({"train": 500, "validation": 150, "test": 100}).save(
        paths.warehouse / "training_dataset")
    res = dg.materialize([tft_tuning], resources=_resources(paths))  # fast profile defaults
    assert res.success
    meta = res.asset_materializations_for_node("tft_tuning")[0].metadata
    study_name = meta["study"].value
    url = paths.optuna_storage_url
    assert (paths.home / "optuna" / "studies.db").is_file()
    study = optuna.load_study(study_name=study_name, storage=url)
    assert len(study.trials) >= 5 == meta["trials_this_run"].value
    best = study.best_params
    assert meta["best_params"].value == best
    assert "optimization_history" in meta["plots"].value

    client = MLflowResource(home=str(paths.home)).client()
    parent = meta["mlflow_run_id"].value
    children = client.search_runs([client.get_run(parent).info.experiment_id],
                                  f"tags.`mlflow.parentRunId` = '{parent}'")
    assert len(children) == len(study.trials)
    complete = [c for c in children if c.data.tags["optuna_state"] == "COMPLETE"]
    assert complete and all("val_loss" in c.data.metrics and "hidden" in c.data.params for c in complete)

    res = dg.materialize([tft_model], resources=_resources(paths),
                         run_config={"ops": {"tft_model": {"config": {"epochs": 1, "max_batches_per_epoch": 2}}}})
    assert res.success
    used = res.asset_materializations_for_node("tft_model")[0].metadata["hyperparameters_from"].value
    assert study_name in used and f"trial {study.best_trial.number}" in used
    pointer = json.loads((paths.checkpoints / "tft" / "current.json").read_text())
    model, _ = load_checkpoint(pointer["checkpoint"])
    for key in ("hidden", "heads", "lstm_layers", "var_width"):
        assert getattr(model.config, key) == best[key]
    assert model.config.dropout == best["dropout"]


def test_without_a_study_the_config_is_used_and_explicit_values_win(foxhunt_home, tmp_path):
    storage = FoxhuntStorage(home=str(foxhunt_home))
    config, source = with_tuned_params("tft", TFTTrainingConfig(), storage)
    assert source == "Config defaults (no finished study)" and config == TFTTrainingConfig()
    study = open_study(storage.paths.optuna_storage_url, "tft-x", "tft")
    study.enqueue_trial({"hidden": 32, "dropout": 0.25})
    study.optimize(lambda t: t.suggest_categorical("hidden", [32]) + t.suggest_float("dropout", 0, 0.3),
                   n_trials=1)
    config, source = with_tuned_params("tft", TFTTrainingConfig(hidden=8), storage)
    assert (config.hidden, config.dropout) == (8, 0.25)
    assert "tft-x trial 0" in source and "run config kept hidden" in source
    config, source = with_tuned_params("tft", TFTTrainingConfig(use_tuned=False), storage)
    assert config.dropout == TFTTrainingConfig().dropout and "use_tuned=false" in source
