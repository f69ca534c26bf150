"""`foxhunt ui` starts webserver + daemon on 127.0.0.1 and, since `dagster dev` ignores
SIGTERM, turns its own SIGTERM into a clean stop of the whole process group (a regression:
it once left five orphaned dagster processes behind)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dagster_children(home: str) -> list[str]:
    out = subprocess.run(["ps", "-eww", "-o", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "dagster" in line and home in line]


def _mlflow_children(home: str) -> list[str]:
    out = subprocess.run(["ps", "-eww", "-o", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "mlflow" in line and home in line]


def test_ui_serves_on_loopback_and_stops_its_process_group_on_sigterm(tmp_path):
    home = str(tmp_path / "home")
    port = _free_port()
    env = dict(os.environ, FOXHUNT_HOME=home)
    mlflow_port = _free_port()
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.Popen([sys.executable, "-m", "foxhunt_pipeline.cli.commands", "ui", "--port", str(port),
                             "--mlflow-port", str(mlflow_port)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5) as r:
                    assert b"dagster_webserver_version" in r.read()
                    break
            except OSError:
                assert proc.poll() is None and time.time() < deadline, proc.stdout.read().decode()[-2000:]
                time.sleep(1)
        assert _dagster_children(home), "the daemon and webserver run with this FOXHUNT_HOME"
        # the MLflow UI runs next to it, on the home's store, where the metadata links point
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{mlflow_port}/health", timeout=5) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert proc.poll() is None and time.time() < deadline + 120, proc.stdout.read().decode()[-2000:]
                time.sleep(1)
        assert _mlflow_children(home)
        # without MLflow 3's GenAI job runner and its huey consumers (idle processes on a laptop)
        leader = next(line.split()[0] for line in _mlflow_children(home) if " mlflow ui " in line)
        group = subprocess.run(["ps", "-ww", "-o", "args=", "-g", leader], capture_output=True, text=True).stdout
        assert "uvicorn" in group and "huey" not in group and "_job_runner" not in group, group
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        deadline = time.time() + 30
        while _dagster_children(home) and time.time() < deadline:
            time.sleep(1)
        assert not _dagster_children(home)
        while _mlflow_children(home) and time.time() < deadline:
            time.sleep(1)
        assert not _mlflow_children(home), "the MLflow UI stops with foxhunt ui"
    finally:
        if proc.poll() is None:  # a failed assertion: the clean stop first, so nothing is orphaned
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
