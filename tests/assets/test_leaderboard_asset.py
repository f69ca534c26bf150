"""model_leaderboard against a real MLflow registry and DuckDB table: the alias `champion`
moves only when a challenger beats the current champion and every baseline on the same
walk-forward protocol; a champion from an older protocol is re-scored first."""

from __future__ import annotations

import json
import math
from datetime import UTC, date, datetime, timedelta
from types import SimpleNamespace

import dagster as dg
import duckdb
import pytest
from mlflow.exceptions import MlflowException

import assets.leaderboard as leaderboard_asset
from assets.evaluation import EVALUATIONS_TABLE, evaluation_rows
from assets.leaderboard import model_leaderboard
from foxhunt_pipeline.config.paths import FoxhuntPaths
from foxhunt_pipeline.storage.warehouse import append_duckdb_table
from resources.mlflow_tracking import MLflowResource
from resources.storage import FoxhuntStorage
from tests.oracle_sidecars import land_sidecars

DAY = 86_400 * 10**9
T0 = datetime(2024, 2, 1, tzinfo=UTC)


def _register(mlflow: MLflowResource, tmp_path, n: int) -> str:
    art = tmp_path / f"ckpt{n}"
    art.mkdir()
    (art / "model.safetensors").write_bytes(b"0")
    with mlflow.start_run(f"tft-{n}") as run:
        run.log_artifacts(art, "checkpoint")
        return run.register("foxhunt-tft", "checkpoint", tags={"precision": "fp32"})


def _result(protocol: str, sharpe: float, trades: float = 20.0):
    """A WalkForwardResult-shaped stand-in: the model and two baselines, two folds."""
    def cand(s, n, ic):
        m = {"sharpe": s, "sharpe_ci_low": s - 0.3, "n_trades": n, "ic": ic, "n_bars": 100.0,
             "sharpe_ES": s, "ci_level": 0.99}
        folds = [SimpleNamespace(fold=SimpleNamespace(number=k), metrics=m,
                                 test_start_ns=k * DAY, test_end_ns=k * DAY + 3600 * 10**9)
                 for k in (1, 2)]
        return SimpleNamespace(folds=folds, pooled=m, equals=None)
    return SimpleNamespace(protocol_id=protocol, candidates={
        "foxhunt-tft": cand(sharpe, trades, 0.05),
        "baseline:flat": cand(0.0, 0.0, math.nan),
        "baseline:lightgbm": cand(0.1, 5.0, 0.01)})


def _write(paths: FoxhuntPaths, version: str, protocol: str, sharpe: float, at: datetime):
    rows = evaluation_rows("tft", version, "fp32", _result(protocol, sharpe), "r", at)
    append_duckdb_table(paths.duckdb, EVALUATIONS_TABLE, rows)
    return rows


def _run(paths: FoxhuntPaths, ok: bool = True) -> str:
    res = dg.materialize([model_leaderboard], resources={
        "storage": FoxhuntStorage(home=str(paths.home)),
        "mlflow": MLflowResource(home=str(paths.home))}, raise_on_error=ok)
    assert res.success == ok
    return (paths.table_dir("model_leaderboard") / "leaderboard.md").read_text()


def _alias(client) -> str:
    return str(client.get_model_version_by_alias("foxhunt-tft", "champion").version)


def test_rows_per_fold_and_pooled_with_nulls(foxhunt_home):
    paths = FoxhuntPaths.from_env().ensure()
    rows = _write(paths, "1", "p1", 1.0, T0)
    assert rows.height == 3 * 3
    with duckdb.connect(str(paths.duckdb), read_only=True) as con:
        got = con.execute("select model, fold, protocol_id, ic, test_start, sharpe_by_root from "
                          "model_evaluations where model = 'baseline:flat' order by fold").fetchall()
    assert [g[1] for g in got] == ["1", "2", "pooled"]
    assert all(g[2] == "p1" and g[3] is None for g in got)  # undefined IC is NULL, not 0
    assert got[0][4] == "1970-01-02T00:00:00Z" and json.loads(got[2][5]) == {"ES": 0.0}


def test_champion_is_rescored_on_the_new_protocol_before_the_comparison(
        foxhunt_home, tmp_path, monkeypatch):
    """One registry through four boards (MLflow set-up is the slow part of this test)."""
    paths = FoxhuntPaths.from_env().ensure()
    mlflow = MLflowResource(home=str(paths.home))
    client = mlflow.client()

    v0 = _register(mlflow, tmp_path, 0)
    _write(paths, v0, "old", sharpe=0.2, at=T0)  # CI low -0.1 < lightgbm 0.1
    board = _run(paths)
    assert "no champion yet" in board and "kept" not in board
    assert "No `oracle` row" in board and "| oracle |" not in board  # nothing landed
    with pytest.raises(MlflowException):
        client.get_model_version_by_alias("foxhunt-tft", "champion")

    v1 = _register(mlflow, tmp_path, 1)
    _write(paths, v1, "old", sharpe=3.0, at=T0 + timedelta(hours=1))
    # generated data of the test trade dates (1970-01-02 .. 03): the oracle is shown, and
    # (a reference with a far higher Sharpe) it neither wins nor blocks the promotion
    land_sidecars(paths.landing, [date(1970, 1, 2), date(1970, 1, 3)])
    board = _run(paths)
    assert _alias(client) == v1 and "PROMOTED" in board
    oracle_line = next(line for line in board.splitlines() if line.startswith("| oracle |"))
    assert oracle_line.startswith("| oracle | reference |") and "never champion" in board

    calls = []

    def rescore(context, storage, mlflow_res, champion):
        calls.append(champion["version"])
        return [leaderboard_asset._row(r) for r in
                _write(paths, champion["version"], "new", 0.2, T0 + timedelta(days=2))
                .iter_rows(named=True)]

    monkeypatch.setattr(leaderboard_asset, "rescore_champion", rescore)
    v2 = _register(mlflow, tmp_path, 2)
    _write(paths, v2, "new", sharpe=0.9, at=T0 + timedelta(days=1))
    board = _run(paths)
    assert calls == [v1]  # the old-period 3.0 was not compared with 0.9
    assert _alias(client) == v2 and "re-scored" in board and "`new`" in board

    def broken(*_):
        raise FileNotFoundError("artifact gone")

    monkeypatch.setattr(leaderboard_asset, "rescore_champion", broken)
    v3 = _register(mlflow, tmp_path, 3)
    _write(paths, v3, "newer", sharpe=5.0, at=T0 + timedelta(days=3))
    board = _run(paths)
    assert _alias(client) == v2
    assert "comparison refused" in board and "artifact gone" in board
