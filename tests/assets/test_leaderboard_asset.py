"""model_leaderboard against a real MLflow registry and DuckDB table: the alias `champion`
moves only when a challenger beats the current champion and every baseline."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import dagster as dg

from assets.evaluation import EVALUATIONS_TABLE, evaluation_rows
from assets.leaderboard import model_leaderboard
from foxhunt_pipeline.config.paths import FoxhuntPaths
from foxhunt_pipeline.storage.warehouse import append_duckdb_table
from resources.mlflow_tracking import MLflowResource
from resources.storage import FoxhuntStorage

BASELINES = {"flat": {"sharpe": 0.0}, "buy_and_hold": {"sharpe": -1.0}}


def _register(mlflow: MLflowResource, tmp_path, n: int) -> str:
    art = tmp_path / f"ckpt{n}"
    art.mkdir()
    (art / "model.safetensors").write_bytes(b"0")
    with mlflow.start_run(f"tft-{n}") as run:
        run.log_artifacts(art, "checkpoint")
        return run.register("foxhunt-tft", "checkpoint", tags={"precision": "fp32"})


def _evaluate(paths: FoxhuntPaths, version: str, sharpe: float, at: datetime) -> None:
    report = SimpleNamespace(metrics={"sharpe": sharpe}, baselines=BASELINES,
                             period={"test_start": "2024-01-10", "test_end": "2024-01-12"})
    append_duckdb_table(paths.duckdb, EVALUATIONS_TABLE, evaluation_rows("tft", version, "fp32", report, "r", at))


def _run(paths: FoxhuntPaths) -> str:
    res = dg.materialize([model_leaderboard], resources={
        "storage": FoxhuntStorage(home=str(paths.home)), "mlflow": MLflowResource(home=str(paths.home))})
    assert res.success
    return (paths.table_dir("model_leaderboard") / "leaderboard.md").read_text()


def test_champion_moves_only_for_a_better_challenger(foxhunt_home, tmp_path):
    paths = FoxhuntPaths.from_env().ensure()
    mlflow = MLflowResource(home=str(paths.home))
    client = mlflow.client()
    t0 = datetime(2024, 2, 1, tzinfo=UTC)

    v1 = _register(mlflow, tmp_path, 1)
    _evaluate(paths, v1, sharpe=1.0, at=t0)
    board = _run(paths)
    assert str(client.get_model_version_by_alias("foxhunt-tft", "champion").version) == v1
    assert "PROMOTED" in board

    v2 = _register(mlflow, tmp_path, 2)
    _evaluate(paths, v2, sharpe=0.5, at=t0 + timedelta(days=1))  # beats baselines, not the champion
    board = _run(paths)
    assert str(client.get_model_version_by_alias("foxhunt-tft", "champion").version) == v1
    assert "kept" in board and "champion" in board.lower()

    v3 = _register(mlflow, tmp_path, 3)
    _evaluate(paths, v3, sharpe=2.0, at=t0 + timedelta(days=2))
    _run(paths)
    assert str(client.get_model_version_by_alias("foxhunt-tft", "champion").version) == v3
    assert client.get_registered_model("foxhunt-tft").tags.get("foxhunt.overall_champion") == "true"
