"""The MLflow UI next to Dagster's, on the home's tracking store: the ``mlflow_run`` links in
asset metadata point at it (through ``FOXHUNT_MLFLOW_UI_URL``), so they open."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from foxhunt_pipeline.config.paths import FoxhuntPaths

# MLflow 3's server also starts a job runner and seven huey consumers for GenAI jobs the
# project never submits: eight idle processes on a laptop, and a slow stop
NO_JOB_EXECUTION = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def start_mlflow_ui(paths: FoxhuntPaths, host: str, port: int, **popen: Any) -> tuple[subprocess.Popen, str]:
    """Start ``mlflow ui`` in its own process group (stop it with ``os.killpg``); returns the
    process and the URL to put in ``FOXHUNT_MLFLOW_UI_URL`` for the runs that write links."""
    # lazy: the resource module imports dagster; the `foxhunt` command imports this one at start
    from resources.mlflow_tracking import rebase_local_store

    rebase_local_store(paths)  # a moved home's store points at this home before anyone reads it
    env = {**(popen.pop("env", None) or os.environ), **NO_JOB_EXECUTION}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", paths.mlflow_tracking_uri,
         "--host", host, "--port", str(port), "--workers", "1"],
        start_new_session=True, cwd=paths.home, env=env, **popen)
    return proc, f"http://{host}:{port}"
