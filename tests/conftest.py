"""Shared fixtures: a throwaway FOXHUNT_HOME, the real DBN samples, few torch threads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# real DBN samples from Databento's own repositories, vendored (tests/data/dbn/MANIFEST.tsv)
DBN_SAMPLES = Path(__file__).resolve().parent / "data" / "dbn"


def pytest_configure(config: pytest.Config) -> None:
    # small training sizes for every asset run in tests (read when definitions load)
    os.environ.setdefault("FOXHUNT_PROFILE", "fast")
    try:
        import torch

        # one thread per xdist worker (the workers already fill the cores), else up to two
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // workers)))
    except ImportError:
        pass


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    skip_gpu = pytest.mark.skip(reason="needs CUDA; none on this machine")
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _settings_restored():
    """A test that chooses a profile (the CLI exports it and loads the settings) does not
    leave it to the tests after it."""
    from foxhunt_pipeline.config import settings

    env, current = os.environ.get("FOXHUNT_PROFILE"), settings._current
    yield
    if env is None:
        os.environ.pop("FOXHUNT_PROFILE", None)
    else:
        os.environ["FOXHUNT_PROFILE"] = env
    settings._current = current


@pytest.fixture
def foxhunt_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "foxhunt_home"
    home.mkdir()
    monkeypatch.setenv("FOXHUNT_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    return home


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op thread for a module (``pytestmark = pytest.mark.usefixtures(...)``):
    small models run fastest so, and timings do not depend on the box's other load."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def dbn_samples() -> Path:
    return DBN_SAMPLES
