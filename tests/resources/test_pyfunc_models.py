"""Registered models the MLflow way: each family's version loads through ``mlflow.pyfunc``
in a fresh process, by alias, and predicts what the project's own path predicts; the
version page is a model card; ``mlflow models serve`` answers; ``foxhunt predict`` takes
``models:/`` URIs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from foxhunt_pipeline.cli.commands import main as cli
from foxhunt_pipeline.serving.loaded import LoadedModel
from resources.mlflow_tracking import MLflowResource
from resources.pyfunc_models import data_range_of, model_card, register_pyfunc
from tests.resources.pyfunc_fixtures import all_artifacts, features_and_data, one_root

FAMILIES = ("tft", "mamba2", "lightgbm", "dqn", "ppo")
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """All five families registered (v1, alias champion) in a home's SQLite store."""
    root = tmp_path_factory.mktemp("pyfunc")
    features, data = features_and_data()
    features.write_parquet(root / "features.parquet")
    artifacts = all_artifacts(data, root / "artifacts")
    mlflow = MLflowResource(home=str(root / "home"))
    for family, artifact in artifacts.items():
        with mlflow.start_run(f"{family}-test", tags={"family": family}) as run:
            card = model_card(family, "fp32", data.meta, data_range=data_range_of(data),
                              metrics={"best_val_loss": 0.25})
            version = register_pyfunc(run, f"foxhunt-{family}", artifact, family=family, precision="fp32",
                                      features=features, card=card)
        mlflow.client().set_registered_model_alias(f"foxhunt-{family}", "champion", version)
    return {"root": root, "features": features, "data": data, "artifacts": artifacts, "mlflow": mlflow,
            "uri": mlflow.resolved_uri()}


def _env(registry) -> dict[str, str]:
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])  # uvicorn
    return {**os.environ, "PATH": path, "MLFLOW_TRACKING_URI": registry["uri"], "PYTHONPATH": str(REPO),
            "FOXHUNT_HOME": str(registry["root"] / "home"), "OMP_NUM_THREADS": "1"}


def _own_path(registry, family: str) -> pl.DataFrame:
    return LoadedModel.load(registry["artifacts"][family]).predict(one_root(registry["features"]))


def _assert_same(got: pl.DataFrame, want: pl.DataFrame, family: str) -> None:
    assert got.height == want.height > 0, family
    assert got.columns == want.columns, family
    assert got["ts_event"].to_list() == want["ts_event"].to_list(), family
    values = [c for c in want.columns if c.startswith("h") or c in ("action", "position")]
    np.testing.assert_allclose(got.select(values).to_numpy().astype(np.float64),
                               want.select(values).to_numpy().astype(np.float64), rtol=0, atol=1e-5,
                               err_msg=family)


@pytest.mark.slow
def test_every_family_loads_by_alias_in_a_fresh_process_and_matches_the_own_path(registry):
    out = registry["root"] / "fresh"
    code = f"""
import mlflow, polars as pl
from tests.resources.pyfunc_fixtures import features_and_data, one_root
df = one_root(features_and_data()[0]).to_pandas()   # the table's own types: UTC ts, float32
for family in {FAMILIES!r}:
    model = mlflow.pyfunc.load_model(f"models:/foxhunt-{{family}}@champion")
    pl.from_pandas(model.predict(df)).write_parquet({str(out)!r} + f"-{{family}}.parquet")
"""
    proc = subprocess.run([sys.executable, "-c", code], env=_env(registry), cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for family in FAMILIES:
        got = pl.read_parquet(f"{out}-{family}.parquet")
        _assert_same(got, _own_path(registry, family), family)


def test_each_version_is_a_model_card_with_signature_and_input_example(registry):
    import mlflow

    client = registry["mlflow"].client()
    for family in FAMILIES:
        mv = client.get_model_version_by_alias(f"foxhunt-{family}", "champion")
        assert mv.tags["precision"] == "fp32" and mv.tags["family"] == family
        card = mv.description
        for needle in ("data range", "2024-03-04", "ES, ZN", "60 s", "4 observed, 3 known, 2 static",
                       "evaluation protocol", "best_val_loss"):
            assert needle in card, f"{family}: {needle!r} not in the model card"
        source = client.get_run(mv.run_id).info.artifact_uri.removeprefix("file://") + "/model"
        info = mlflow.models.Model.load(source)
        names = [c.name for c in info.signature.inputs.inputs]
        assert names[:3] == ["ts_event", "root", "contract_seq"] and "f_0" in names
        assert info.saved_input_example_info is not None
        outputs = [c.name for c in info.signature.outputs.inputs]
        assert ("h1_q50" in outputs) if family in ("tft", "mamba2", "lightgbm") else \
            ("action" in outputs)


@pytest.mark.parametrize("family", ["mamba2", "lightgbm", "ppo"])
def test_foxhunt_predict_takes_a_registered_model_uri_like_an_artifact_path(registry, family, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", registry["uri"])
    root = registry["root"]
    outs = {}
    for name, model in (("uri", f"models:/foxhunt-{family}@champion"), ("path", str(registry["artifacts"][family]))):
        outs[name] = root / f"cli-{family}-{name}.parquet"
        res = CliRunner().invoke(cli, ["predict", model, "--root", "ES", "--features", str(root / "features.parquet"),
                                       "--out", str(outs[name]), "--home", str(root / "home")])
        assert res.exit_code == 0, res.output + repr(res.exception)
    _assert_same(pl.read_parquet(outs["uri"]), pl.read_parquet(outs["path"]), family)
    _assert_same(pl.read_parquet(outs["uri"]), _own_path(registry, family), family)


def test_foxhunt_predict_names_an_unknown_registered_model(registry, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", registry["uri"])
    res = CliRunner().invoke(cli, ["predict", "models:/foxhunt-nope@champion", "--features",
                                   str(registry["root"] / "features.parquet"), "--home", str(registry["root"] / "home")])
    assert res.exit_code != 0 and "foxhunt-nope" in res.output


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_mlflow_models_serve_answers_a_scoring_request(registry):
    port = _free_port()
    mlflow_bin = Path(sys.executable).with_name("mlflow")
    proc = subprocess.Popen(
        [str(mlflow_bin), "models", "serve", "-m", "models:/foxhunt-tft/1", "--env-manager", "local",
         "-h", "127.0.0.1", "-p", str(port), "-w", "1"],
        env=_env(registry), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 240
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
            assert time.time() < deadline, "mlflow models serve did not come up"
            time.sleep(1)
        frame = one_root(registry["features"]).with_columns(pl.col("ts_event").dt.to_string("%Y-%m-%dT%H:%M:%SZ"))
        body = json.dumps({"dataframe_split": {"columns": frame.columns, "data": frame.rows()}}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            answer = json.loads(r.read())
        got = pl.DataFrame(answer["predictions"])
        want = _own_path(registry, "tft")
        assert got.height == want.height
        np.testing.assert_allclose(got["h1_q50"].to_numpy(), want["h1_q50"].to_numpy(), atol=1e-5)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_quantized_agent_is_registered_the_same_way_tagged_with_its_precision(registry, monkeypatch):
    import mlflow

    from models.agents.policy import load_policy
    from models.quantization.report import quantize_agent

    monkeypatch.setenv("MLFLOW_TRACKING_URI", registry["uri"])
    report = quantize_agent(load_policy(registry["artifacts"]["dqn"]), registry["data"], model_name="dqn",
                            out_dir=registry["root"] / "quantized", precisions=("fp32", "int8"),
                            latency_repeats=1, export_formats=("torchscript",))
    with registry["mlflow"].start_run("dqn-int8", tags={"family": "dqn"}) as run:
        version = register_pyfunc(run, "foxhunt-dqn", report.artifacts["int8"], family="dqn", precision="int8",
                                  features=registry["features"], card="int8", artifact_path="model_int8")
    mv = registry["mlflow"].client().get_model_version("foxhunt-dqn", version)
    assert mv.tags["precision"] == "int8" and version != "1"
    got = pl.from_pandas(mlflow.pyfunc.load_model(f"models:/foxhunt-dqn/{version}").predict(
        one_root(registry["features"]).to_pandas()))
    _assert_same(got, LoadedModel.load(report.artifacts["int8"]).predict(one_root(registry["features"])), "dqn int8")
    fp32 = _own_path(registry, "dqn")
    assert (got["action"] == fp32["action"]).mean() >= 0.95


def test_a_moved_home_serves_its_registered_models_and_never_touches_the_old_place(tmp_path, monkeypatch):
    """``mv`` a home with a registered model: `foxhunt predict models:/...` from the new place
    reads the moved artifacts, and the old place is never recreated."""
    import shutil

    from tests.resources.pyfunc_fixtures import agent_dir

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    features, data = features_and_data()
    old = tmp_path / "old-home"
    tracking = MLflowResource(home=str(old))
    artifact = agent_dir("ppo", data, tmp_path / "ppo")
    with tracking.start_run("ppo-move", tags={"family": "ppo"}) as run:
        register_pyfunc(run, "foxhunt-ppo", artifact, family="ppo", precision="fp32", features=features, card="x")
    features.write_parquet(tmp_path / "features.parquet")
    new = tmp_path / "new-home"
    shutil.move(old, new)
    shutil.rmtree(artifact)  # only the home's own copy is left
    out = tmp_path / "moved.parquet"
    res = CliRunner().invoke(cli, ["predict", "models:/foxhunt-ppo/1", "--root", "ES", "--features",
                                   str(tmp_path / "features.parquet"), "--out", str(out), "--home", str(new)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert pl.read_parquet(out).height > 0
    assert not old.exists(), "something wrote into the old home"
    source = MLflowResource(home=str(new)).client().get_model_version("foxhunt-ppo", "1").source
    assert str(new) in source and str(old) not in source
