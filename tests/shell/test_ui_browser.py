"""The product as a user meets it: a live webserver + daemon on 127.0.0.1, driven by headless
Chromium and the GraphQL API, with automation left to run on its own."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from foxhunt_pipeline.cli.instance import ensure_dagster_home
from foxhunt_pipeline.cli.mlflow_ui import start_mlflow_ui
from foxhunt_pipeline.config.paths import FoxhuntPaths

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
LOCATION = "foxhunt"
GROUPS = {
    "ingestion": ["raw_bars", "continuous_bars"],
    "features": ["features", "training_dataset"],
    "training": ["tft_model", "mamba2_model", "lightgbm_model", "ensemble_model", "dqn_agent",
                 "ppo_agent"],
    "evaluation": ["tft_evaluation", "mamba2_evaluation", "lightgbm_evaluation",
                   "ensemble_evaluation", "dqn_evaluation", "ppo_evaluation", "model_leaderboard"],
    "quantization": ["tft_quantized", "mamba2_quantized", "ensemble_quantized", "dqn_quantized",
                     "ppo_quantized"],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, url: str, paths: FoxhuntPaths, proc: subprocess.Popen, log: Path, mlflow_url: str = ""):
        self.url, self.paths, self.proc, self.log = url, paths, proc, log
        self.mlflow_url = mlflow_url  # the MLflow UI that `foxhunt ui` would start next to Dagster
        self.landed = False

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        req = urllib.request.Request(f"{self.url}/graphql", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            out = json.loads(resp.read())
        assert "errors" not in out, out
        return out["data"]

    def materialized(self, asset: str) -> bool:
        data = self.graphql(
            """query($k: AssetKeyInput!) { assetOrError(assetKey: $k) {
                 ... on Asset { assetMaterializations(limit: 1) { runId } } } }""",
            {"k": {"path": [asset]}},
        )["assetOrError"]
        return bool(data and data.get("assetMaterializations"))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("ui_home")
    paths = FoxhuntPaths.from_env(home).ensure()
    saved = {k: os.environ.get(k) for k in ("DAGSTER_HOME", "FOXHUNT_HOME")}
    ensure_dagster_home(paths)
    for k, v in saved.items():  # ensure_dagster_home sets them for this process; undo that
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    port = _free_port()
    mlflow_proc, mlflow_url = start_mlflow_ui(paths, "127.0.0.1", _free_port(),
                                              stdout=(home / "mlflow-ui.log").open("wb"), stderr=subprocess.STDOUT)
    env = dict(os.environ, FOXHUNT_HOME=str(home), DAGSTER_HOME=str(paths.dagster_home),
               FOXHUNT_PROFILE="fast", FOXHUNT_LANDING_INTERVAL="5", FOXHUNT_AUTOMATION_INTERVAL="10",
               OMP_NUM_THREADS="1")  # its runs share the cores with the other test workers
    env["FOXHUNT_MLFLOW_UI_URL"] = mlflow_url  # as `foxhunt ui` does: the metadata links point at it
    log = home / "dagster-dev.log"
    # dagster dev ignores SIGTERM: own process group, SIGINT then SIGKILL at the end
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagster", "dev", "-w", str(ROOT / "workspace.yaml"), "-h", "127.0.0.1",
         "-p", str(port)],
        cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    srv = Server(url, paths, proc, log, mlflow_url)
    try:
        deadline = time.time() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{url}/server_info", timeout=5):
                    break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail(f"dagster dev did not start:\n{log.read_text()[-3000:]}")
                time.sleep(1)
        _wait_for_location(srv)
        yield srv
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(mlflow_proc.pid, signal.SIGINT)  # stops while dagster dev does
        _stop(proc)
        _stop(mlflow_proc)


def _wait_for_location(srv: Server, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        data = srv.graphql("{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }")
        entries = data["workspaceOrError"]["locationEntries"]
        if any(e["name"] == LOCATION and e["loadStatus"] == "LOADED" for e in entries):
            return
        time.sleep(1)
    pytest.fail(f"code location {LOCATION} did not load:\n{srv.log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=30)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def browser():
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    if CHROMIUM is None:
        pytest.skip("Debian chromium not installed (apt-get install chromium); .ci/run installs it")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )
        yield b
        b.close()


def _page(browser, url: str, viewport: tuple[int, int] = (1600, 1000)):
    page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
    page.goto(url, wait_until="networkidle", timeout=90_000)
    skip = page.get_by_role("button", name="Skip")
    if skip.count():
        skip.first.click()
    _close_dialogs(page)
    return page


def _close_dialogs(page) -> None:
    """Close whatever dialog the UI opened on its own (a notice on a new instance): its
    backdrop would take every click meant for the page (seen in CI, never here)."""
    for _ in range(5):
        if not page.locator(".bp5-overlay-backdrop").count():
            return
        page.keyboard.press("Escape")
        page.wait_for_timeout(500)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dialog-left-open.png"))


def test_asset_graph_shows_every_asset(server, browser):
    ARTIFACTS.mkdir(exist_ok=True)
    for group, assets in GROUPS.items():
        # a big screen: the evaluation group (seven assets, two columns) fits without panning
        page = _page(browser, f"{server.url}/locations/{LOCATION}/asset-groups/{group}", (2560, 2400))
        try:
            for asset in assets:
                page.get_by_text(asset, exact=True).first.wait_for(timeout=60_000)
        finally:
            page.screenshot(path=str(ARTIFACTS / f"asset-graph-{group}.png"))
        page.close()


def test_launch_materialization_over_graphql_and_see_it_on_the_asset_page(server, browser):
    launch = server.graphql(
        """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
             __typename ... on LaunchRunSuccess { run { runId } }
             ... on PythonError { message } ... on InvalidSubsetError { message } } }""",
        {"p": {"selector": {"repositoryLocationName": LOCATION, "repositoryName": "__repository__",
                            "jobName": "__ASSET_JOB", "assetSelection": [{"path": ["continuous_bars"]}]},
               "runConfigData": {},
               # one trade-date partition (nothing landed yet: the date builds empty)
               "executionMetadata": {"tags": [{"key": "dagster/partition", "value": "2024-01-02"}]}}},
    )["launchRun"]
    assert launch["__typename"] == "LaunchRunSuccess", launch
    run_id = launch["run"]["runId"]
    deadline = time.time() + 300
    status = None
    while time.time() < deadline:
        status = server.graphql("query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }",
                                {"id": run_id})["runOrError"]["status"]
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            break
        time.sleep(2)
    assert status == "SUCCESS", f"run {run_id} ended {status}:\n{server.log.read_text()[-3000:]}"
    page = _page(browser, f"{server.url}/assets/continuous_bars?view=events")
    page.get_by_text(run_id[:8]).first.wait_for(timeout=60_000)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "continuous_bars-materialized.png"), full_page=True)
    page.close()


def test_landed_files_flow_to_a_trained_model_without_anyone_pressing_a_button(server):
    _land_once(server)
    wanted = ["raw_bars", "continuous_bars", "features", "training_dataset"]
    deadline = time.time() + float(os.environ.get("FOXHUNT_E2E_TIMEOUT", "900"))
    seen: set[str] = set()
    models = {"tft_model", "mamba2_model", "dqn_agent", "ppo_agent"}
    while time.time() < deadline:
        seen |= {a for a in [*wanted, *models] if a not in seen and server.materialized(a)}
        if set(wanted) <= seen and seen & models:
            break
        time.sleep(5)
    assert set(wanted) <= seen and seen & models, (
        f"materialized so far: {sorted(seen)}\n{server.log.read_text()[-4000:]}"
    )


def _land_once(server: Server) -> None:
    """The 9 days the automation flow trains on, landed once per module (a test run alone
    lands them itself)."""
    from foxhunt_pipeline.synthetic.generate import generate

    if not server.landed:
        generate(server.paths.landing, days=9, roots=("ES",), schema="ohlcv-1m", seed=11)
        server.landed = True


def _latest_metadata(server: Server, asset: str) -> dict[str, dict]:
    data = server.graphql(
        """query($k: AssetKeyInput!) { assetOrError(assetKey: $k) { ... on Asset {
             assetMaterializations(limit: 1) { metadataEntries { label __typename
               ... on UrlMetadataEntry { url } ... on MarkdownMetadataEntry { mdStr }
               ... on TextMetadataEntry { text } } } } } }""",
        {"k": {"path": [asset]}},
    )["assetOrError"]
    return {e["label"]: e for e in data["assetMaterializations"][0]["metadataEntries"]}


def _get(url: str, timeout: float = 120) -> tuple[int, bytes]:
    """GET with retries until ``timeout`` (the MLflow UI may still be starting)."""
    deadline = time.time() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                return resp.status, resp.read()
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(1)


def test_tft_model_page_shows_its_plots_and_its_mlflow_link_opens(server, browser):
    """What issue 16 promised a user of the asset page: the loss curve and the TFT's
    interpretability plots are images there, and the mlflow_run link opens the run."""
    _land_once(server)
    deadline = time.time() + float(os.environ.get("FOXHUNT_E2E_TIMEOUT", "900"))
    while not server.materialized("tft_model"):
        assert time.time() < deadline, f"tft_model never materialized:\n{server.log.read_text()[-4000:]}"
        time.sleep(3)
    meta = _latest_metadata(server, "tft_model")
    images = {label for label, e in meta.items() if "data:image/png;base64," in e.get("mdStr", "")}
    assert {"loss_curve", "variable_importance", "attention"} <= images, sorted(meta)

    ARTIFACTS.mkdir(exist_ok=True)
    page = _page(browser, f"{server.url}/assets/tft_model")
    # Dagster shows markdown over 1000 characters behind "[Show Markdown]", in a dialog
    for label in ("loss_curve", "variable_importance", "attention"):
        row = page.locator("tr", has=page.get_by_text(label, exact=True)).first
        _close_dialogs(page)
        row.get_by_text("[Show Markdown]").click(timeout=60_000)
        dialog = page.get_by_role("dialog")
        img = dialog.locator('img[src^="data:image/png;base64,"]').first
        img.wait_for(timeout=60_000)
        width = img.evaluate("async i => { await i.decode(); return i.naturalWidth; }")
        assert width > 0, f"{label}: the image did not decode"
        if label == "variable_importance":
            page.screenshot(path=str(ARTIFACTS / "tft_model-variable-importance.png"), animations="disabled")
        dialog.get_by_role("button", name="Close", exact=True).click()
        dialog.wait_for(state="detached", timeout=30_000)

    # the mlflow_run link, as the page shows it, answers and names this materialization's run
    link = meta["mlflow_run"]["url"]
    assert link.startswith(server.mlflow_url + "/"), (link, server.mlflow_url)
    assert page.locator(f'a[href="{link}"]').count() >= 1, "the asset page links to the MLflow run"
    page.close()
    status, body = _get(link)
    assert status == 200 and b"<html" in body.lower()
    experiment_id, run_id = link.split("#/experiments/")[1].split("/runs/")
    assert run_id == meta["mlflow_run_id"]["text"]
    _, raw = _get(f"{server.mlflow_url}/api/2.0/mlflow/runs/get?run_id={run_id}")
    run = json.loads(raw)["run"]["info"]
    assert run["experiment_id"] == experiment_id
    mlflow_page = browser.new_page(viewport={"width": 1600, "height": 1000})
    mlflow_page.goto(link, wait_until="load", timeout=90_000)  # the MLflow UI polls: no networkidle
    mlflow_page.get_by_text(run["run_name"]).first.wait_for(timeout=90_000)
    mlflow_page.screenshot(path=str(ARTIFACTS / "tft_model-mlflow-run.png"))
    mlflow_page.close()
