"""The whole graph on a temporary FOXHUNT_HOME, through the persistent-instance runner that
``foxhunt materialize`` and ``foxhunt demo`` use, at the ``fast`` profile."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
import pytest

from foxhunt_pipeline.cli.runner import materialize_selection
from foxhunt_pipeline.config.paths import FoxhuntPaths
from foxhunt_pipeline.synthetic.generate import generate

pytestmark = pytest.mark.slow

FAMILIES = ("tft", "mamba2", "lightgbm", "dqn", "ppo")


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _query(paths: FoxhuntPaths, sql: str):
    with duckdb.connect(str(paths.duckdb), read_only=True) as con:
        return con.execute(sql).fetchall()


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """One full run shared by the assertions below (it is the expensive part)."""
    home = tmp_path_factory.mktemp("e2e_home")
    mp = pytest.MonkeyPatch()
    mp.setenv("FOXHUNT_HOME", str(home))
    mp.setenv("DAGSTER_HOME", str(home / "dagster"))
    paths = FoxhuntPaths.from_env().ensure()
    landed = generate(paths.landing, days=10, roots=("ES", "ZN"), schema="ohlcv-1m", seed=3)
    assert landed
    checksums = {p.name: _sha(p) for p in paths.landing.iterdir()}  # with generator sidecars
    log: list[str] = []
    ok = materialize_selection(paths, ["*"], profile="fast", echo=log.append)
    yield paths, ok, log, checksums
    mp.undo()


def test_every_step_and_check_passed(pipeline):
    paths, ok, log, _ = pipeline
    assert ok, "\n".join(log)
    assert any(line.startswith("[ok] raw_bars[") for line in log)


def test_landed_files_are_untouched(pipeline):
    paths, _, _, checksums = pipeline
    assert {p.name: _sha(p) for p in paths.landing.iterdir()} == checksums


def test_duckdb_has_the_views_and_tables_users_query(pipeline):
    paths, *_ = pipeline
    (raw,) = _query(paths, "select count(*) from raw_bars")[0:1]
    (cont,) = _query(paths, "select count(*) from continuous_bars")[0:1]
    (feat,) = _query(paths, "select count(*) from features")[0:1]
    assert raw[0] > cont[0] > 0 and feat[0] > 0
    roots = {r for (r,) in _query(paths, "select distinct root from continuous_bars")}
    assert roots == {"ES", "ZN"}
    spreads = _query(paths, "select count(*) from raw_bars where symbol like '%-%'")[0][0]
    assert spreads == 0
    families = {f for (f,) in _query(paths, "select distinct family from model_evaluations")}
    assert families >= set(FAMILIES) | {"baseline"}
    assert _query(paths, "select count(*) from rolls")[0][0] >= 0
    # every bar table carries its CME trade date, the partitions' key
    for table in ("raw_bars", "continuous_bars", "features"):
        first, = _query(paths, f"select min(trade_date) from {table}")
        assert first[0] is not None, table


def test_models_are_registered_in_mlflow_and_the_leaderboard_decided(pipeline):
    paths, *_ = pipeline
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=paths.mlflow_tracking_uri, registry_uri=paths.mlflow_tracking_uri)
    for family in FAMILIES:
        versions = client.search_model_versions(f"name='foxhunt-{family}'")
        assert versions, family
        assert any(v.tags.get("precision") == "fp32" for v in versions)
        pointer = json.loads((paths.checkpoints / family / "current.json").read_text())
        assert pointer["registered_model"] == f"foxhunt-{family}"
    board = (paths.table_dir("model_leaderboard") / "leaderboard.md").read_text()
    for family in FAMILIES:
        assert f"foxhunt-{family}" in board
    assert "baseline:flat" in board
    assert "Champion decisions" in board
    _, _, log, _ = pipeline
    assert board.strip() in "\n".join(log)  # foxhunt materialize prints the leaderboard it built


def test_every_model_is_scored_per_fold_and_pooled_on_one_protocol(pipeline):
    """fast profile: 2 walk-forward folds; every family and baseline on the same protocol."""
    paths, *_ = pipeline
    folds = _query(paths, "select model, list(distinct fold order by fold) from model_evaluations "
                          "group by model")
    for model, fs in folds:
        assert fs == ["1", "2", "pooled"], model
    assert {m for m, _ in folds} >= {f"foxhunt-{f}" for f in FAMILIES} | {"baseline:flat"}
    protocols = _query(paths, "select distinct protocol_id from model_evaluations")
    assert len(protocols) == 1 and protocols[0][0]
    # an agent has no forecast: its IC is NULL, not 0
    assert _query(paths, "select count(*) from model_evaluations where model = 'foxhunt-dqn' "
                         "and ic is not null")[0][0] == 0
    board = (paths.table_dir("model_leaderboard") / "leaderboard.md").read_text()
    assert f"Protocol `{protocols[0][0]}`" in board


def test_the_same_file_landed_twice_adds_no_rows_and_runs_appear_on_the_instance(pipeline):
    paths, *_ = pipeline
    before = _query(paths, "select count(*) from continuous_bars")[0][0]
    first = sorted(paths.landing.iterdir())[0]
    shutil.copyfile(first, paths.landing / f"copy of {first.name}")
    log: list[str] = []
    assert materialize_selection(paths, ["raw_bars", "continuous_bars"], profile="fast", echo=log.append), log
    assert _query(paths, "select count(*) from continuous_bars")[0][0] == before
    instance = dg.DagsterInstance.from_config(str(paths.dagster_home))
    try:
        assert f"copy of {first.name}" in instance.get_dynamic_partitions("landed_files")
        assert len(instance.get_runs()) >= 3
    finally:
        instance.dispose()


def test_a_corrupt_file_fails_its_partition_with_a_named_error_and_keeps_the_rest(pipeline):
    paths, *_ = pipeline
    before = pl.read_parquet(paths.table_dir("continuous_bars") / "trade_date=*" / "*.parquet")
    good = sorted(p for p in paths.landing.glob("glbx-*.dbn.zst"))[1]
    bad = paths.landing / "glbx-mdp3-20990101.ohlcv-1m.dbn.zst"
    bad.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])
    log: list[str] = []
    ok = materialize_selection(paths, ["raw_bars"], profile="fast", echo=log.append)
    assert not ok
    failed = [line for line in log if "FAILED" in line]
    assert failed and bad.name in "\n".join(log)
    assert bad.exists() and bad.stat().st_size == len(good.read_bytes()) // 2
    after = pl.read_parquet(paths.table_dir("continuous_bars") / "trade_date=*" / "*.parquet")
    assert after.equals(before)


def test_quantized_variants_are_reported_and_accepted_ones_registered(pipeline):
    paths, *_ = pipeline
    from mlflow.tracking import MlflowClient

    from models.export import load_artifact

    client = MlflowClient(tracking_uri=paths.mlflow_tracking_uri, registry_uri=paths.mlflow_tracking_uri)
    precisions = set()
    for family in (f for f in FAMILIES if f != "lightgbm"):  # boosters are not quantized
        pointer = json.loads((paths.checkpoints / family / "current.json").read_text())
        quantized = Path(pointer["run_dir"]) / "quantized"
        report = json.loads((quantized / "quantization.json").read_text())
        assert {r["precision"] for r in report["rows"]} >= {"fp32", "int8"}, family
        assert report["recommended"] and report["reason"], family
        for precision, artifact in report["artifacts"].items():
            assert not Path(artifact).is_absolute(), artifact  # a moved home still finds it
            fn, meta = load_artifact(quantized / artifact)
            assert meta["precision"] == precision
        precisions |= {v.tags.get("precision") for v in client.search_model_versions(f"name='foxhunt-{family}'")}
    assert "fp32" in precisions and precisions - {"fp32"}, precisions


def test_foxhunt_predict_runs_an_exported_forecaster_on_the_features_table(pipeline, tmp_path):
    from click.testing import CliRunner

    from foxhunt_pipeline.cli.commands import main

    paths, *_ = pipeline
    pointer = json.loads((paths.checkpoints / "mamba2" / "current.json").read_text())
    quantized = Path(pointer["run_dir"]) / "quantized"
    report = json.loads((quantized / "quantization.json").read_text())
    assert report["artifacts"], report["rows"]
    artifact = str(quantized / next(iter(report["artifacts"].values())))
    out = tmp_path / "pred.parquet"
    result = CliRunner().invoke(main, ["predict", artifact, "--root", "ES", "--out", str(out)])
    assert result.exit_code == 0, result.output
    pred = pl.read_parquet(out)
    assert pred.height > 0 and set(pred["root"].unique()) == {"ES"}
    qcols = [c for c in pred.columns if c.startswith("h") and "_q" in c]
    assert len(qcols) == 5 * 9
    assert pred.select(qcols).null_count().sum_horizontal().item() == 0
    # quantiles never cross
    assert (pred["h1_q10"] <= pred["h1_q50"]).all() and (pred["h1_q50"] <= pred["h1_q90"]).all()
