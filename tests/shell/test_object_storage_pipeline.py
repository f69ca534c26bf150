"""The graph from landed files to a quantized model with the landing zone, the warehouse and
the checkpoints on non-local fsspec roots (memory:// standing in for s3://, the same code
path: one object per write, nothing on local disk that a later pod could rely on)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import dagster as dg
import pytest
import torch
from upath import UPath

from assets.evaluation import tft_evaluation
from assets.features import features, training_dataset
from assets.ingestion import continuous_bars, raw_bars
from assets.leaderboard import model_leaderboard
from assets.quantization import tft_quantized
from assets.training import tft_model
from foxhunt_pipeline.automation import RANGE_END, RANGE_START
from foxhunt_pipeline.ingest.landing import PARTITIONS_NAME
from foxhunt_pipeline.storage import continuous_dates, model_store, object_store
from foxhunt_pipeline.synthetic.generate import generate
from models.training.checkpoint import load_checkpoint
from resources.mlflow_tracking import MLflowResource
from resources.pipes import build_pipes_subprocess_client
from resources.storage import FoxhuntStorage
from resources.torch_device import TorchDevice

pytestmark = pytest.mark.slow

TFT = {"epochs": 1, "max_batches_per_epoch": 3, "hidden": 8, "heads": 2, "lstm_layers": 1,
       "var_width": 2, "batch_size": 32}


# 8 calendar days hold ~6 trade dates: 2 folds of 1 test date each
WALK_FORWARD = {"folds": 2, "test_days": 1, "validation_days": 1, "bootstrap": 50,
                "latency_calls": 5}


def _files(root: UPath) -> list[str]:
    return sorted(str(p)[len(str(root)):] for p in root.rglob("*") if p.is_file())


@pytest.fixture
def memory_base(tmp_path):
    base = UPath(f"memory://foxhunt-{tmp_path.name}")
    yield base
    if base.exists():
        base.fs.rm(base.path, recursive=True)


def test_graph_runs_with_every_durable_path_on_object_storage(foxhunt_home, tmp_path, memory_base):
    landing, warehouse, artifacts = (memory_base / n for n in ("landing", "warehouse", "artifacts"))
    storage = FoxhuntStorage(home=str(foxhunt_home), warehouse_url=str(warehouse),
                             artifacts_url=str(artifacts), landing_url=str(landing))
    checksums = {}
    for f in generate(tmp_path / "vendor", days=8, roots=("ES",), seed=5):
        (landing / f.name).write_bytes(f.read_bytes())
        checksums[f.name] = hashlib.sha256(f.read_bytes()).hexdigest()
    resources = {"storage": storage, "mlflow": MLflowResource(home=str(foxhunt_home)),
                 "torch_device": TorchDevice(prefer="cpu", threads=1),
                 "pipes_subprocess_client": build_pipes_subprocess_client()}
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(PARTITIONS_NAME, sorted(checksums))
    for name in sorted(checksums):
        assert dg.materialize([raw_bars], partition_key=name, instance=instance,
                              resources=resources).success
    downstream = [continuous_bars, features, training_dataset, tft_model, tft_evaluation,
                  tft_quantized, model_leaderboard]
    # the trade-date partitioned assets over every date, in one run; then the rest
    span = continuous_dates.rebuild_span(warehouse, continuous_dates.all_dates(warehouse))
    assert dg.materialize([raw_bars, *downstream], selection=downstream[:2], instance=instance,
                          resources=resources, tags={RANGE_START: span[0], RANGE_END: span[1]}).success
    res = dg.materialize([raw_bars, *downstream], selection=downstream[2:], instance=instance,
                         resources=resources, run_config={"ops": {"tft_model": {"config": TFT},
                                                  "tft_evaluation": {"config": WALK_FORWARD}}})
    assert res.success

    # the landed objects are untouched, and every durable output is in the object store
    assert {n: hashlib.sha256((landing / n).read_bytes()).hexdigest() for n in checksums} == checksums
    stored = _files(warehouse)
    assert sum(s.startswith("/raw_bars/source_file=") for s in stored) == len(checksums)
    assert any(s.startswith("/continuous_bars/trade_date=") for s in stored)
    assert any(s.startswith("/features/trade_date=") for s in stored)
    assert {"/training_dataset/current.json", "/model_leaderboard/leaderboard.md"} <= set(stored)
    assert any(s.startswith("/model_evaluations/tft-") for s in stored)
    assert "foxhunt-tft" in (warehouse / "model_leaderboard" / "leaderboard.md").read_text()
    for local_dir in ("warehouse", "checkpoints", "landing"):
        assert not [p for p in (foxhunt_home / local_dir).rglob("*") if p.is_file()], local_dir

    # the catalogue's views read the store
    with object_store.connect_catalogue(storage.duckdb_path, warehouse) as con:
        n_features = con.sql("select count(*) from features").fetchall()[0][0]
        n_evals = con.sql("select count(*) from model_evaluations where family = 'tft'").fetchall()[0][0]
    assert n_features > 0 and n_evals > 0

    # another machine (an empty cache) gets the same model from the pointer alone
    pointer = model_store.current(artifacts, "tft")
    assert pointer["checkpoint"].startswith(str(artifacts)) and pointer["run_dir"].startswith(str(artifacts))
    run = UPath(pointer["run_dir"])
    assert (run / "evaluation").is_dir() and (run / "quantized" / "quantization.json").is_file()
    report = json.loads((run / "quantized" / "quantization.json").read_text())
    assert report["recommended"]
    first = model_store.local_checkpoint(pointer, tmp_path / "cache_a")
    second = model_store.local_checkpoint(pointer, tmp_path / "cache_b")
    assert first != second and first.is_file() and second.is_file()
    (m1, _), (m2, _) = load_checkpoint(first), load_checkpoint(second)
    for (k, a), (_, b) in zip(m1.state_dict().items(), m2.state_dict().items(), strict=True):
        assert torch.equal(a, b), k
    shutil.rmtree(storage.scratch / "cache")  # a new pod: the dataset comes from the store again
    assert dg.materialize([raw_bars, *downstream], selection=[tft_evaluation], instance=instance,
                          resources=resources, run_config={"ops": {
                              "tft_evaluation": {"config": WALK_FORWARD}}}).success


def test_a_missing_landed_object_names_the_url(foxhunt_home, memory_base):
    storage = FoxhuntStorage(home=str(foxhunt_home), landing_url=str(memory_base / "landing"),
                             warehouse_url=str(memory_base / "warehouse"))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(PARTITIONS_NAME, ["glbx-mdp3-20240102.ohlcv-1m.dbn.zst"])
    with pytest.raises(dg.Failure, match="memory://.*glbx-mdp3-20240102"):
        dg.materialize([raw_bars], partition_key="glbx-mdp3-20240102.ohlcv-1m.dbn.zst",
                       instance=instance, resources={"storage": storage})


def test_roots_default_to_foxhunt_home_and_follow_the_environment(foxhunt_home, monkeypatch):
    storage = FoxhuntStorage(home=str(foxhunt_home))
    assert object_store.is_local(storage.warehouse_root)
    assert Path(storage.checkpoints_root.path) == foxhunt_home.resolve() / "checkpoints"
    monkeypatch.setenv(object_store.ARTIFACTS_URL_ENV, "memory://bucket/artifacts")
    monkeypatch.setenv(object_store.LANDING_URL_ENV, "memory://bucket/landing")
    assert str(storage.checkpoints_root) == "memory://bucket/artifacts"
    assert str(storage.landing_root) == "memory://bucket/landing"
    assert str(FoxhuntStorage(home=str(foxhunt_home), artifacts_url="memory://x/y").checkpoints_root) \
        == "memory://x/y"
