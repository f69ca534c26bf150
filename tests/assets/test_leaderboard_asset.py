"""model_leaderboard against a real MLflow registry, DuckDB table and stored test bars: the
alias `champion` moves only when a challenger beats every naive baseline and the current
champion in the paired test on the same walk-forward protocol and is in the MCS; a champion
from an older protocol is re-scored first; a new home says "no champion yet" once."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from types import SimpleNamespace

import dagster as dg
import duckdb
import numpy as np
import pytest
from mlflow.exceptions import MlflowException

import assets.common.champions as champions
from assets.leaderboard import model_leaderboard
from foxhunt_pipeline.config.paths import FoxhuntPaths
from foxhunt_pipeline.storage import object_store
from foxhunt_pipeline.storage.warehouse import append_duckdb_table
from models.evaluation.evaluation_table import bars_frame, evaluation_rows
from models.evaluation.leaderboard_report import evaluation_row
from resources.champion import DECAY_TAG, DEMOTED_TAG
from resources.champion_registry import champion_refs
from resources.mlflow_tracking import MLflowResource
from resources.storage import BARS_TABLE, EVALUATIONS_TABLE, FoxhuntStorage
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


N = 3000  # test bars
NAIVE = ("baseline:flat", "baseline:buy_and_hold", "baseline:momentum_1", "baseline:climatology")


def _bars(edge: float, seed: int, flat: bool = False) -> SimpleNamespace:
    """Pooled test bars: the same bars (ES, one per minute from day 1) for every candidate,
    a P&L of ``edge`` per bar plus noise (``flat``: none at all)."""
    rng = np.random.default_rng(seed)
    pnl = np.zeros(N) if flat else edge + rng.standard_normal(N) * 1e-4
    return SimpleNamespace(root=np.full(N, "ES"), ts=DAY + np.arange(N) * 60 * 10**9,
                           positions=np.zeros(N) if flat else np.ones(N), pnl=pnl)


def _result(protocol: str, edge: float, seed: int = 0):
    """A WalkForwardResult-shaped stand-in: the model and the naive baselines (on the same
    bars every time: they are deterministic), two folds."""
    def cand(bars):
        s = float(bars.pnl.mean() / max(bars.pnl.std(), 1e-12) * np.sqrt(80_000))
        m = {"sharpe": s, "sharpe_ci_low": s - 10, "n_trades": 0.0 if not bars.positions.any()
             else 20.0, "n_bars": float(N), "sharpe_ES": s, "ci_level": 0.99}
        folds = [SimpleNamespace(fold=SimpleNamespace(number=k), metrics=m,
                                 test_start_ns=k * DAY, test_end_ns=k * DAY + 3600 * 10**9)
                 for k in (1, 2)]
        return SimpleNamespace(folds=folds, pooled=m, equals=None, bars=bars)
    naive = {b: cand(_bars(0.0, 100 + i, flat=(i == 0))) for i, b in enumerate(NAIVE)}
    return SimpleNamespace(protocol_id=protocol, protocol={"bars_per_year": 80_000.0},
                           candidates={"foxhunt-tft": cand(_bars(edge, seed)), **naive})


def _write(paths: FoxhuntPaths, version: str, protocol: str, edge: float, at: datetime,
           seed: int = 0):
    result = _result(protocol, edge, seed)
    rows = evaluation_rows("tft", version, "fp32", result, "r", at)
    append_duckdb_table(paths.duckdb, EVALUATIONS_TABLE, rows)
    object_store.write_table_part(object_store.warehouse_root(), f"{BARS_TABLE}/{protocol}",
                                  f"tft-{version}-{seed}", bars_frame(result, version))
    return rows


def _run(paths: FoxhuntPaths, ok: bool = True, resamples: int | None = None) -> str:
    config = {} if resamples is None else {
        "run_config": {"ops": {"model_leaderboard": {"config": {"resamples": resamples}}}}}
    res = dg.materialize([model_leaderboard], resources={
        "storage": FoxhuntStorage(home=str(paths.home)),
        "mlflow": MLflowResource(home=str(paths.home))}, raise_on_error=ok, **config)
    assert res.success == ok
    return (paths.table_dir("model_leaderboard") / "leaderboard.md").read_text()


def _alias(client) -> str:
    return str(client.get_model_version_by_alias("foxhunt-tft", "champion").version)


def test_rows_per_fold_and_pooled_with_nulls(foxhunt_home):
    paths = FoxhuntPaths.from_env().ensure()
    rows = _write(paths, "1", "p1", 1e-5, T0)
    assert rows.height == 5 * 3
    with duckdb.connect(str(paths.duckdb), read_only=True) as con:
        got = con.execute("select model, fold, protocol_id, ic, test_start, sharpe_by_root from "
                          "model_evaluations where model = 'baseline:flat' order by fold").fetchall()
    assert [g[1] for g in got] == ["1", "2", "pooled"]
    assert all(g[2] == "p1" and g[3] is None for g in got)  # undefined IC is NULL, not 0
    assert got[0][4] == "1970-01-02T00:00:00Z" and json.loads(got[2][5]) == {"ES": 0.0}


def test_a_new_home_has_no_champion_and_no_warning_about_it(foxhunt_home, tmp_path):
    mlflow = MLflowResource(home=str(FoxhuntPaths.from_env().ensure().home))
    heard: list[str] = []
    assert champion_refs(mlflow, ["tft", "lightgbm"], heard.append) == ({}, None)
    _register(mlflow, tmp_path, 0)  # a registered model without the alias
    assert champion_refs(mlflow, ["tft"], heard.append) == ({}, None)
    assert heard == []


def test_champion_by_the_paired_rule_and_rescored_on_a_new_protocol(
        foxhunt_home, tmp_path, monkeypatch):
    """One registry through four boards (MLflow set-up is the slow part of this test)."""
    paths = FoxhuntPaths.from_env().ensure()
    mlflow = MLflowResource(home=str(paths.home))
    client = mlflow.client()

    v0 = _register(mlflow, tmp_path, 0)
    _write(paths, v0, "old", edge=0.0, at=T0)  # noise: beats no baseline
    board = _run(paths)
    assert "no champion yet (baselines)" in board and "kept" not in board
    assert "**No overall champion yet**" in board
    assert "No `oracle` row" in board and "| oracle |" not in board  # nothing landed
    with pytest.raises(MlflowException):
        client.get_model_version_by_alias("foxhunt-tft", "champion")

    v1 = _register(mlflow, tmp_path, 1)
    _write(paths, v1, "old", edge=2e-5, at=T0 + timedelta(hours=1), seed=1)
    # generated data of the test trade dates (1970-01-02 .. 03): the oracle is shown, and
    # (a reference with a far higher Sharpe) it neither wins nor blocks the promotion
    land_sidecars(paths.landing, [date(1970, 1, 2), date(1970, 1, 3)])
    board = _run(paths)
    assert _alias(client) == v1 and "PROMOTED (no champion)" in board
    assert f"**Overall champion: foxhunt-tft v{v1}**" in board
    assert "foxhunt predict models:/foxhunt-tft@champion" in board
    head = next(line for line in board.splitlines() if line.startswith("| model |"))
    assert "vs_champion | vs_best_baseline | mcs" in head
    oracle_line = next(line for line in board.splitlines() if line.startswith("| oracle |"))
    assert oracle_line.startswith("| oracle | reference |") and "never champion" in board

    calls = []

    def rescore(context, storage, mlflow_res, champion):
        calls.append(champion["version"])
        return [evaluation_row(r) for r in
                _write(paths, champion["version"], "new", 2e-5, T0 + timedelta(days=2), seed=1)
                .iter_rows(named=True)]

    monkeypatch.setattr(champions, "rescore_champion", rescore)
    v2 = _register(mlflow, tmp_path, 2)  # as good as the champion, on other luck: no churn
    _write(paths, v2, "new", edge=2e-5, at=T0 + timedelta(days=1), seed=2)
    board = _run(paths)
    assert calls == [v1] and "re-scored" in board and "`new`" in board
    assert _alias(client) == v1 and "kept (champion)" in board

    v3 = _register(mlflow, tmp_path, 3)  # clearly better than the champion
    _write(paths, v3, "new", edge=8e-5, at=T0 + timedelta(days=3), seed=3)
    board = _run(paths)
    assert _alias(client) == v3 and f"beats champion foxhunt-tft v{v1}" in board

    def broken(*_):
        raise FileNotFoundError("artifact gone")

    monkeypatch.setattr(champions, "rescore_champion", broken)
    v4 = _register(mlflow, tmp_path, 4)
    _write(paths, v4, "newer", edge=2e-4, at=T0 + timedelta(days=4), seed=4)
    board = _run(paths)
    assert _alias(client) == v3
    assert "comparison refused" in board and "artifact gone" in board


def test_evaluations_without_stored_bars_promote_nobody_and_say_why(foxhunt_home, tmp_path):
    paths = FoxhuntPaths.from_env().ensure()
    mlflow = MLflowResource(home=str(paths.home))
    v = _register(mlflow, tmp_path, 0)
    append_duckdb_table(paths.duckdb, EVALUATIONS_TABLE,
                        evaluation_rows("tft", v, "fp32", _result("legacy", 5e-5), "r", T0))
    board = _run(paths)
    assert "no test bars stored for protocol legacy" in board and "PROMOTED" not in board


def test_a_decayed_champion_the_retraining_does_not_replace_is_demoted(foxhunt_home, tmp_path):
    """After live_pnl_decay failed on the champion: nothing moves until every family was
    evaluated again; then a champion the retrained models do not beat loses its alias (the
    reason on its version and in the board), is never a candidate again, and the best other
    qualifier is promoted in the same run."""
    paths = FoxhuntPaths.from_env().ensure()
    mlflow = MLflowResource(home=str(paths.home))
    client = mlflow.client()
    v1 = _register(mlflow, tmp_path, 1)
    _write(paths, v1, "p", edge=8e-5, at=T0, seed=1)
    _run(paths, resamples=200)
    assert _alias(client) == v1
    alarm = {"trade_date": "1970-01-09", "raised_at": (T0 + timedelta(hours=1)).isoformat(),
             "message": "DECAY: live P&L fell below the backtest"}
    client.set_model_version_tag("foxhunt-tft", v1, DECAY_TAG, json.dumps(alarm))
    board = _run(paths, resamples=200)  # the retraining has not reached the table yet
    assert _alias(client) == v1 and "demoted" not in board
    v2 = _register(mlflow, tmp_path, 2)  # retrained after the alarm, no better than v1
    _write(paths, v2, "p", edge=2e-5, at=T0 + timedelta(hours=2), seed=2)
    board = _run(paths, resamples=200)
    assert f"**demoted** foxhunt-tft v{v1}" in board and "1970-01-09" in board
    assert "live P&L decayed" in client.get_model_version("foxhunt-tft", v1).tags[DEMOTED_TAG]
    assert _alias(client) == v2 and f"**Overall champion: foxhunt-tft v{v2}**" in board
    board = _run(paths, resamples=200)  # settled: v2 stays, nothing is demoted again
    assert _alias(client) == v2 and "**demoted**" not in board


def test_protocol_bars_keep_the_last_copy_of_a_rescored_version_with_compact_roots(foxhunt_home):
    """A version scored twice on a protocol keeps one copy of each bar (the last written);
    roots come back as a fixed-width string array, not one Python object per bar (a year's
    3M stored bars held as objects doubled the leaderboard's peak memory)."""
    paths = FoxhuntPaths.from_env().ensure()
    at = T0
    _write(paths, "1", "p1", 2e-5, at, seed=1)
    _write(paths, "1", "p1", 2e-5, at, seed=2)  # the same version re-scored: a new part
    _write(paths, "2", "p1", 1e-5, at, seed=3)
    bars, per_year = champions.protocol_bars(FoxhuntStorage(home=str(paths.home)), "p1")
    assert per_year == 80_000.0
    assert {"foxhunt-tft v1", "foxhunt-tft v2", *NAIVE} <= set(bars)
    again = _bars(2e-5, 2)
    v1 = bars["foxhunt-tft v1"]
    assert v1.pnl.shape == (N,) and np.array_equal(v1.pnl, again.pnl)
    assert v1.root.dtype.kind == "U" and set(v1.root) == {"ES"}
    assert np.array_equal(v1.ts, again.ts)
