"""The profile a home was made with is kept; a CPU-only machine does not start full-size
training unless asked; long training says how far it is and how long is left."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from foxhunt_pipeline.cli import commands
from foxhunt_pipeline.config.home_profile import resolve_profile, store_profile, stored_profile


@pytest.fixture
def no_env_profile(monkeypatch):
    monkeypatch.delenv("FOXHUNT_PROFILE", raising=False)


def test_stored_profile_wins_over_the_gpu_default(tmp_path, no_env_profile):
    store_profile(tmp_path, "demo")
    assert stored_profile(tmp_path) == "demo"
    assert resolve_profile(None, tmp_path, has_gpu=True)[0] == "demo"
    assert resolve_profile("default", tmp_path, has_gpu=False) == ("default", "chosen with --profile")


def test_no_gpu_and_no_choice_uses_the_cpu_profile_and_says_so(tmp_path, no_env_profile):
    name, why = resolve_profile(None, tmp_path, has_gpu=False)
    assert name == "demo" and "no GPU" in why and "--profile default" in why
    assert resolve_profile(None, tmp_path, has_gpu=True)[0] == "default"


def test_env_profile_beats_the_stored_one(tmp_path, monkeypatch):
    store_profile(tmp_path, "demo")
    monkeypatch.setenv("FOXHUNT_PROFILE", "fast")
    assert resolve_profile(None, tmp_path, has_gpu=False)[0] == "fast"


def test_a_bad_stored_profile_is_named(tmp_path, no_env_profile):
    (tmp_path / "profile").write_text("huge\n")
    with pytest.raises(ValueError, match="profile.*'huge'"):
        resolve_profile(None, tmp_path, has_gpu=True)


def test_materialize_uses_the_homes_profile(tmp_path, no_env_profile, monkeypatch):
    seen = {}

    def fake(paths, selection, *, profile, all_partitions, echo, **_):
        seen["profile"] = profile
        return True

    monkeypatch.setattr("foxhunt_pipeline.cli.runner.materialize_selection", fake)
    monkeypatch.setattr("foxhunt_pipeline.config.home_profile.has_gpu", lambda: True)
    home = tmp_path / "home"
    home.mkdir()
    store_profile(home, "demo")
    res = CliRunner().invoke(commands.main, ["materialize", "--home", str(home)])
    assert res.exit_code == 0, res.output
    assert seen["profile"] == "demo" and "profile: demo (stored in" in res.output


def test_progress_note_estimates_the_time_left():
    from models.training.progress import progress_note

    assert progress_note(2, 10, 60.0) == ", 20% done, ~4m00s left"
    assert progress_note(10, 10, 60.0) == ", 100% done, ~0s left"
    assert progress_note(0, 10, 5.0) == ""


def test_every_automated_run_is_tagged_with_the_profile_its_code_location_loaded_with():
    """The jobs, schedule and automation sensor are built when the code location loads, with
    the profile of its environment (a fresh process, as `dagster dev` starts one)."""
    import json
    import subprocess
    import sys

    code = ("import json; from foxhunt_pipeline import automation as a; print(json.dumps("
            "[dict(a.ingest_job.tags or {}), dict(a.history_job.tags or {}), dict(a.retrain_job.tags or {}), "
            "dict(a.automation_sensor.run_tags or {}), a.PROFILE_TAG]))")
    env = {**os.environ, "FOXHUNT_PROFILE": "demo"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])
    *tags, key = json.loads(out.stdout.strip().splitlines()[-1])
    assert all(t.get(key) == "demo" for t in tags), tags
