"""Data-parallel training: the same optimisation as one process with the same global batch,
launched by an asset through Pipes + torchrun, with rank 0 alone reporting and writing."""

import json
import time
from pathlib import Path

import dagster as dg
import numpy as np
import pytest
import torch
import torch.distributed as dist

from assets.common.distributed_training import (
    first_rank_error,
    launch_ddp_training,
    torchrun_command,
)
from assets.ddp_worker import load_spec, write_rank_error
from models.registry import build_model
from models.training.checkpoint import load_checkpoint
from models.training.ddp_protocol import model_config_for
from models.training.distributed import shard, train_forecaster_ddp
from models.training.loop import TrainConfig, predict_quantiles, train_forecaster
from resources.pipes import PIPES_RESOURCE_KEY, build_pipes_subprocess_client
from tests.model_data import synthetic_training_data

PARAMS = {"hidden": 8, "heads": 2, "lstm_layers": 1, "var_width": 2, "dropout": 0.0}
# 282 train windows / global batch 37: 8 steps per epoch, the last one 23 windows (12 + 11)
TRAIN = {"epochs": 2, "batch_size": 37, "lr": 3e-3, "patience": None, "eval_batch_size": 64}


def _data():
    return synthetic_training_data({"train": 300, "validation": 150}, n_observed=4, n_known=3,
                                   n_static=2, lookback=16, horizon=3, segment_length=400)


def _single_process(data, train: dict):
    torch.manual_seed(train.get("seed", 0))
    model = build_model("tft", model_config_for("tft", data, PARAMS))
    return model, train_forecaster(model, data, TrainConfig.from_dict(train))


def test_shards_of_a_global_batch_are_disjoint_and_cover_it():
    batch = np.random.default_rng(0).permutation(23)
    parts = [shard(batch, r, 2) for r in range(2)]
    assert sorted(np.concatenate(parts).tolist()) == sorted(batch.tolist())
    assert [len(p) for p in parts] == [12, 11]
    with pytest.raises(ValueError, match="rank 2 outside"):
        shard(batch, 2, 2)


def test_one_rank_group_reproduces_the_single_process_harness(tmp_path: Path):
    data = _data()
    train = {**TRAIN, "max_batches_per_epoch": 3}
    _, single = _single_process(data, train)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        torch.manual_seed(0)
        model = build_model("tft", model_config_for("tft", data, PARAMS))
        result = train_forecaster_ddp(model, data, TrainConfig.from_dict(train),
                                      checkpoint_dir=tmp_path / "state")
    finally:
        dist.destroy_process_group()
    for ours, theirs in zip(result.history, single.history, strict=True):
        assert ours["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-5)
        assert ours["val_loss"] == pytest.approx(theirs["val_loss"], rel=1e-5)
    assert result.last_checkpoint is not None and result.last_checkpoint.is_file()


@pytest.mark.gpu
def test_one_rank_nccl_group_on_cuda_tracks_the_harness(tmp_path: Path):
    data = _data()
    train = {**TRAIN, "max_batches_per_epoch": 3}
    torch.manual_seed(0)
    model = build_model("tft", model_config_for("tft", data, PARAMS))
    single = train_forecaster(model, data, TrainConfig.from_dict(train), device="cuda")
    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        torch.manual_seed(0)
        model = build_model("tft", model_config_for("tft", data, PARAMS))
        result = train_forecaster_ddp(model, data, TrainConfig.from_dict(train), device="cuda")
    finally:
        dist.destroy_process_group()
    for ours, theirs in zip(result.history, single.history, strict=True):
        assert ours["val_loss"] == pytest.approx(theirs["val_loss"], rel=1e-3)


def test_root_cause_is_the_earliest_rank_error(tmp_path: Path):
    assert first_rank_error(tmp_path) is None
    write_rank_error(tmp_path, 1, ValueError("bad row 7 in observed.npy"))
    time.sleep(0.01)
    write_rank_error(tmp_path, 0, RuntimeError("Connection closed by peer"))
    error = first_rank_error(tmp_path)
    assert error["rank"] == 1 and error["type"] == "ValueError"
    assert "bad row 7" in error["message"] and "ValueError" in error["traceback"]


def test_spec_errors_name_the_file_and_field(tmp_path: Path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"family": "tft"}))
    with pytest.raises(ValueError, match=r"spec\.json.*lacks.*model_params"):
        load_spec(spec)
    cmd = torchrun_command(2, spec)
    assert cmd[1:3] == ["-m", "torch.distributed.run"] and "--nproc-per-node=2" in cmd


def _run_ddp_asset(tmp_path: Path, dataset: Path, out_dir: Path, train: dict):
    captured: dict = {}

    @dg.asset
    def ddp_forecaster(context: dg.AssetExecutionContext,
                       pipes_subprocess_client: dg.PipesSubprocessClient) -> dg.MaterializeResult:
        captured["result"] = launch_ddp_training(
            context, pipes_subprocess_client, "tft", PARAMS, train, dataset, out_dir, 2,
            device="cpu")
        return dg.MaterializeResult(metadata={"val_loss": captured["result"]["best_val_loss"]})

    instance = dg.DagsterInstance.ephemeral()
    run = dg.materialize([ddp_forecaster], instance=instance, raise_on_error=False,
                         resources={PIPES_RESOURCE_KEY: build_pipes_subprocess_client()})
    return run, instance, captured.get("result")


@pytest.mark.slow
def test_two_gloo_ranks_match_one_process_report_once_and_write_one_checkpoint(tmp_path: Path):
    data = _data()
    dataset = data.save(tmp_path / "dataset")
    out_dir = tmp_path / "ddp"
    run, instance, result = _run_ddp_asset(tmp_path, dataset, out_dir, TRAIN)
    assert run.success, run.all_events
    single_model, single = _single_process(data, TRAIN)

    assert result["world_size"] == 2 and result["backend"] == "gloo"
    assert len(result["history"]) == len(single.history) == TRAIN["epochs"]
    for ours, theirs in zip(result["history"], single.history, strict=True):
        assert ours["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-4)
        assert ours["val_loss"] == pytest.approx(theirs["val_loss"], rel=1e-4)
    epoch_lines = [e.user_message for e in instance.all_logs(run.run_id)
                   if "tft epoch" in (e.user_message or "")]
    assert len(epoch_lines) == TRAIN["epochs"], epoch_lines  # rank 0 only, once per epoch

    models = sorted(p.relative_to(out_dir).as_posix() for p in out_dir.rglob("*.safetensors"))
    assert models == ["model/model.safetensors", "train_state/best.safetensors",
                      "train_state/last.safetensors"]
    assert json.loads((out_dir / "result.json").read_text())["checkpoint"] == result["checkpoint"]
    ddp_model, meta = load_checkpoint(result["checkpoint"])
    assert meta["world_size"] == 2
    val = data.window_dataset("validation")
    np.testing.assert_allclose(predict_quantiles(ddp_model, val),
                               predict_quantiles(single_model, val), atol=2e-4)


@pytest.mark.slow
def test_a_failing_rank_fails_the_asset_with_its_own_error(tmp_path: Path):
    dataset = _data().save(tmp_path / "dataset")
    out_dir = tmp_path / "ddp"
    out_dir.mkdir()
    (out_dir / "train_state").write_text("not a directory")  # only rank 0 writes there
    run, _, result = _run_ddp_asset(tmp_path, dataset, out_dir,
                                    {**TRAIN, "epochs": 1, "max_batches_per_epoch": 1})
    assert not run.success and result is None
    failure = run.get_step_failure_events()[0].step_failure_data.error
    message = failure.message if failure.cause is None else str(failure)
    assert "DDP rank 0 of 2 failed" in message and "FileExistsError" in message, message
