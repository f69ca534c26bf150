"""champion_forecasts and live_performance through Dagster, with a registered champion: one
run over three trade dates forecasts each of them (rows named by model and version in the
`forecasts` view), yields each date's drift checks and its decay check, and a live P&L far
below the champion's backtest fails the decay check and records the alarm on the version;
`foxhunt forecast` then re-forecasts a date in seconds and refuses one with no data."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime

import dagster as dg
import numpy as np
import polars as pl
from click.testing import CliRunner

from assets.forecasting import (
    DECAY,
    FEATURE_DRIFT,
    PREDICTION_DRIFT,
    champion_forecasts,
    live_performance,
)
from foxhunt_pipeline.automation import RANGE_END, RANGE_START
from foxhunt_pipeline.cli.commands import main
from foxhunt_pipeline.config.paths import FoxhuntPaths
from foxhunt_pipeline.storage import dataset_store, object_store, trade_dates
from foxhunt_pipeline.storage.warehouse import append_duckdb_table
from resources.champion import DECAY_TAG, OVERALL_TAG
from resources.mlflow_tracking import MLflowResource
from resources.pyfunc_models import register_pyfunc
from resources.storage import BARS_TABLE, EVALUATIONS_TABLE, FoxhuntStorage
from tests.forecasting.conftest import DAYS, Home

BARS_PER_YEAR = 23 * 60 * 252.0


def _champion(paths: FoxhuntPaths, home: Home) -> MLflowResource:
    """foxhunt-lightgbm v1, the overall champion, judged on DAYS[0..1] with a large edge."""
    mlflow = MLflowResource(home=str(paths.home))
    with mlflow.start_run("lightgbm-test", tags={"family": "lightgbm"}) as run:
        version = register_pyfunc(run, "foxhunt-lightgbm", home.artifacts["lightgbm"],
                                  family="lightgbm", precision="fp32", features=None, card="test")
    client = mlflow.client()
    client.set_registered_model_alias("foxhunt-lightgbm", "champion", version)
    client.set_registered_model_tag("foxhunt-lightgbm", OVERALL_TAG, "true")
    root = object_store.warehouse_root(home=paths.home)
    meta = paths.warehouse / dataset_store.DATASET_DIR / dataset_store.META
    meta.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text(json.dumps({"roots": list(home.costs), "cost_log_return": list(home.costs.values()),
                                "bars_per_year": BARS_PER_YEAR}))
    ts = trade_dates.read_dates(root, "features", DAYS[0], DAYS[1], columns=["ts_event", "root"])
    rng = np.random.default_rng(0)
    bars = ts.with_columns(model=pl.lit("foxhunt-lightgbm"), version=pl.lit(version),
                           position=pl.lit(1.0), bars_per_year=pl.lit(BARS_PER_YEAR),
                           pnl=pl.Series(2e-4 + 1e-4 * rng.standard_normal(ts.height)),
                           protocol_id=pl.lit("p1"))
    object_store.write_table_part(root, f"{BARS_TABLE}/p1", "lightgbm", bars)
    append_duckdb_table(paths.duckdb, EVALUATIONS_TABLE, pl.DataFrame({
        "model": ["foxhunt-lightgbm"], "version": [version], "family": ["lightgbm"],
        "fold": ["pooled"], "protocol_id": ["p1"], "precision": ["fp32"],
        "evaluated_at": [datetime(2024, 3, 9, tzinfo=UTC)]}))
    return mlflow


def test_the_champion_forecasts_each_date_and_its_live_checks_act(home: Home, tmp_path,
                                                                  monkeypatch):
    monkeypatch.setenv("FOXHUNT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
    paths = FoxhuntPaths.from_env().ensure()
    shutil.rmtree(paths.warehouse, ignore_errors=True)
    shutil.copytree(home.warehouse, paths.warehouse)
    mlflow = _champion(paths, home)
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [champion_forecasts, live_performance], instance=instance,
            resources={"storage": FoxhuntStorage(home=str(paths.home)), "mlflow": mlflow},
            tags={RANGE_START: str(DAYS[2]), RANGE_END: str(DAYS[4])})
        assert result.success
        checks = [e.event_specific_data for e in result.all_events
                  if e.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION]
    keys = {str(d) for d in DAYS[2:]}
    for name in (FEATURE_DRIFT, PREDICTION_DRIFT, DECAY):
        assert {c.partition for c in checks if c.check_name == name} == keys, name
    decay = sorted((c for c in checks if c.check_name == DECAY), key=lambda c: c.partition)
    assert not decay[-1].passed and "DECAY" in decay[-1].metadata["message"].value
    assert decay[-1].target_materialization_data is not None  # what automation reads
    alarm = json.loads(mlflow.client().get_model_version("foxhunt-lightgbm", "1").tags[DECAY_TAG])
    assert alarm["trade_date"] in keys
    with object_store.connect_catalogue(paths.duckdb, object_store.warehouse_root()) as con:
        got = con.sql("select trade_date, model, version, count(*) from forecasts "
                      "group by all order by 1").fetchall()
        realised = con.sql("select count(pnl) from realised").fetchall()[0][0]
    day_rows = {d: trade_dates.read_dates(object_store.warehouse_root(), "features", d, d).height
                for d in DAYS[2:]}
    assert [(g[0], g[1], g[2]) for g in got] == [(d, "foxhunt-lightgbm", "1") for d in DAYS[2:]]
    assert [g[3] for g in got] == [day_rows[d] for d in DAYS[2:]]  # every bar of the date
    assert realised > 0.9 * sum(day_rows.values())

    runner = CliRunner()
    again = runner.invoke(main, ["forecast", "--date", str(DAYS[4])])
    assert again.exit_code == 0, again.output
    assert f"[ok] {DAYS[4]}: {day_rows[DAYS[4]]} forecasts (ES" in again.output
    assert "replaced" in again.output and "realised so far" in again.output
    none = runner.invoke(main, ["forecast", "--date", "2024-03-11"])
    assert none.exit_code == 1 and "2024-03-11: no landed file holds it" in none.output
