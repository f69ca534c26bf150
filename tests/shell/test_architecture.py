"""The dependency rule of docs/architecture.md holds, and import-linter would catch a break."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("foxhunt_pipeline", "assets", "resources", "models")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT_IMPORTS.exists(),
                                reason="import-linter is a test extra: pip install -e '.[test]'")


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tree, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(tree), "PATH": ""})


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_project_keeps_its_import_contracts(tree: Path):
    proc = _lint(tree)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


@pytest.mark.parametrize(("module", "bad_import", "contract"), [
    ("models/quantile.py", "from foxhunt_pipeline.storage import warehouse", "shell > assets"),
    ("foxhunt_pipeline/features/grid.py", "import dagster", "know nothing of Dagster"),
    ("foxhunt_pipeline/ingest/landing.py", "import mlflow", "know nothing of Dagster"),
    ("resources/storage.py", "from assets import common", "shell > assets"),
    ("assets/common/__init__.py", "from foxhunt_pipeline import definitions", "shell > assets"),
    ("models/tft/layers.py", "from models.mamba2 import ssd", "independent"),
    ("models/export/__init__.py", "from models.quantization import recommend", "inside models"),
    ("foxhunt_pipeline/basics/atomic.py", "from models import windows", "shell > assets"),
    ("models/evaluation/metrics.py", "from models import export", "inside models"),
    ("models/evaluation/backtest.py", "from models.quantization import measure", "inside models"),
    ("models/training/loop.py", "from models.evaluation import metrics", "inside models"),
    ("models/training/checkpoint.py", "from models import export", "inside models"),
    ("models/agents/imitation.py", "from models.evaluation import backtest", "inside models"),
    ("models/training/loop.py", "from models.agents import state", "inside models"),
])
def test_a_wrong_import_breaks_a_contract(tree: Path, module: str, bad_import: str,
                                          contract: str):
    with (tree / module).open("a") as f:
        f.write(f"\n{bad_import}  # noqa\n")
    proc = _lint(tree)
    assert proc.returncode != 0
    broken = [line for line in proc.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(contract in line for line in broken), proc.stdout
