"""A small MLflow resource (dagster-mlflow pins older dagster): one run per materialization,
SQLite store and artifacts under ``$FOXHUNT_HOME/mlflow`` by default.

``mlflow`` itself is imported inside the methods that talk to it: it takes seconds to
import, and the ``foxhunt`` command imports this module for ``rebase_local_store`` and
``UI_URL_ENV`` without needing it."""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import dagster as dg

from foxhunt_pipeline.config.paths import FoxhuntPaths

EXPERIMENT = "foxhunt"
UI_URL_ENV = "FOXHUNT_MLFLOW_UI_URL"
DEFAULT_UI_URL = "http://127.0.0.1:5000"


class MLflowResource(dg.ConfigurableResource):
    """``tracking_uri`` empty = the SQLite store under ``FOXHUNT_HOME``; set it to a
    tracking server URL in a cluster profile."""

    tracking_uri: str = ""
    experiment: str = EXPERIMENT
    home: str = ""
    # where the MLflow UI serves the local store: empty = $FOXHUNT_MLFLOW_UI_URL (set by
    # `foxhunt ui`, which starts it next to Dagster), else mlflow's own default port
    ui_url: str = ""

    def _paths(self) -> FoxhuntPaths:
        return FoxhuntPaths.from_env(self.home or None).ensure()

    def resolved_uri(self) -> str:
        return self.tracking_uri or self._paths().mlflow_tracking_uri

    def client(self):
        from mlflow.tracking import MlflowClient  # lazy: see the module docstring

        if not self.tracking_uri:
            rebase_local_store(self._paths())
        return MlflowClient(tracking_uri=self.resolved_uri(), registry_uri=self.resolved_uri())

    def experiment_id(self) -> str:
        client = self.client()
        exp = client.get_experiment_by_name(self.experiment)
        if exp is not None:
            return exp.experiment_id
        location = None if self.tracking_uri else self._paths().mlflow_artifacts.as_uri()
        from mlflow.exceptions import MlflowException  # lazy: see the module docstring

        try:
            return client.create_experiment(self.experiment, artifact_location=location)
        except MlflowException as e:  # created concurrently by another step
            exp = client.get_experiment_by_name(self.experiment)
            if exp is None:
                raise
            dg.get_dagster_logger().info(f"experiment {self.experiment} created meanwhile ({e.error_code})")
            return exp.experiment_id

    @contextlib.contextmanager
    def start_run(self, run_name: str, tags: Mapping[str, str] | None = None) -> Iterator[TrackedRun]:
        client = self.client()
        run = client.create_run(self.experiment_id(), run_name=run_name, tags=dict(tags or {}))
        tracked = TrackedRun(client, run.info.run_id, self)
        try:
            yield tracked
        except BaseException:
            client.set_terminated(run.info.run_id, status="FAILED")
            raise
        client.set_terminated(run.info.run_id, status="FINISHED")

    def run_url(self, run_id: str) -> str:
        """Link to the run in the MLflow UI: the tracking server itself when there is one,
        else where `mlflow ui --backend-store-uri <sqlite store>` serves by default."""
        base = self.tracking_uri if self.tracking_uri.startswith(("http://", "https://")) else (
            self.ui_url or os.environ.get(UI_URL_ENV) or DEFAULT_UI_URL)
        return f"{base.rstrip('/')}/#/experiments/{self.experiment_id()}/runs/{run_id}"

    def latest_version(self, model_name: str) -> Any | None:
        """The newest version of ``model_name``; ``None`` when it has none or the registry
        cannot say (the cause logged)."""
        from mlflow.exceptions import MlflowException  # lazy: see the module docstring

        client = self.client()
        try:
            versions = client.search_model_versions(f"name='{model_name}'")
        except MlflowException as e:
            dg.get_dagster_logger().warning(f"versions of {model_name} unreadable: {e.error_code}: {e.message}")
            return None
        return max(versions, key=lambda v: int(v.version), default=None)


# (table, column) pairs of the SQLite store that hold artifact locations
_LOCATION_COLUMNS = (("experiments", "artifact_location"), ("runs", "artifact_uri"),
                     ("model_versions", "source"), ("model_versions", "storage_location"),
                     ("logged_models", "artifact_location"))
_rebased: set[str] = set()


def rebase_local_store(paths: FoxhuntPaths) -> int:
    """MLflow stores absolute artifact locations; when the home was moved or copied, point
    every one under the old ``<home>/mlflow/artifacts`` at this home's, so nothing is read
    from or written into the old place. Once per process and store; returns rows changed."""
    db = paths.mlflow_dir / "mlflow.db"
    key = str(db)
    if key in _rebased or not db.exists():
        return 0
    new = str(paths.mlflow_artifacts)
    changed = 0
    with contextlib.closing(sqlite3.connect(db, timeout=60)) as con:
        tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
        if "experiments" not in tables:
            return 0
        olds = set()
        for (loc,) in con.execute("select artifact_location from experiments"):
            path = str(loc or "").removeprefix("file://")
            if path.endswith("/mlflow/artifacts") and path != new:
                olds.add(path)
        with con:
            for old in olds:
                for table, column in _LOCATION_COLUMNS:
                    if table in tables:
                        cur = con.execute(
                            f"update {table} set {column} = replace({column}, ?, ?) "  # noqa: S608 - fixed names
                            f"where {column} like ?", (old, new, f"%{old}%"))
                        changed += cur.rowcount
    _rebased.add(key)
    return changed


class TrackedRun:
    """Thin helpers over one MLflow run; non-finite metrics are skipped rather than crashing."""

    def __init__(self, client: Any, run_id: str, resource: MLflowResource):
        self.client = client
        self.run_id = run_id
        self.resource = resource

    def log_params(self, params: Mapping[str, Any]) -> None:
        for k, v in _flatten(params).items():
            self.client.log_param(self.run_id, k, str(v)[:500])

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        from mlflow.entities import Metric  # lazy: see the module docstring

        now = int(time.time() * 1000)
        batch = [
            Metric(_metric_key(k), float(v), now, step or 0)
            for k, v in metrics.items()
            if not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v)
        ]
        for i in range(0, len(batch), 1000):  # one store round trip per 1000 (MLflow's batch cap)
            self.client.log_batch(self.run_id, metrics=batch[i : i + 1000])

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_artifacts(self, path: Path, artifact_path: str | None = None) -> None:
        self.client.log_artifacts(self.run_id, str(path), artifact_path)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        for k, v in tags.items():
            self.client.set_tag(self.run_id, k, str(v))

    def artifact_uri(self, artifact_path: str) -> str:
        run = self.client.get_run(self.run_id)
        return f"{run.info.artifact_uri}/{artifact_path}"

    def register(self, model_name: str, artifact_path: str, tags: Mapping[str, str] | None = None) -> str:
        """Registers the logged artifact directory as a new model version; returns the version."""
        from mlflow.exceptions import MlflowException  # lazy: see the module docstring

        with contextlib.suppress(MlflowException):
            self.client.create_registered_model(model_name)
        mv = self.client.create_model_version(
            model_name, source=self.artifact_uri(artifact_path), run_id=self.run_id, tags=dict(tags or {})
        )
        return str(mv.version)


def _metric_key(k: str) -> str:
    return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in k)


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out
