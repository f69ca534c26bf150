"""Studies in the SQLite storage: the median pruner stops a trial that is behind, two
processes share one study, and training finds the newest study's best trial."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest

from models.tuning.objective import pruning_hook
from models.tuning.spaces import FAMILIES, suggest, to_config_values
from models.tuning.study import newest_best, open_study, redact, summary

ROOT = Path(__file__).resolve().parents[3]


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'optuna' / 'studies.db'}"


def test_a_trial_behind_the_median_is_pruned_and_stored(tmp_path):
    url = _url(tmp_path)
    study = open_study(url, "tft-crafted", "tft", seed=0)
    curves = {0: [1.0, 0.8], 1: [1.1, 0.9], 2: [9.0, 8.0], 3: [0.7, 0.5]}

    def objective(trial: optuna.Trial) -> float:
        hook = pruning_hook(trial, "val_loss", "epoch")
        for epoch, loss in enumerate(curves[trial.number], 1):
            hook({"epoch": epoch, "val_loss": loss})
        return curves[trial.number][-1]

    study.optimize(objective, n_trials=4)
    states = [t.state for t in optuna.load_study(study_name="tft-crafted", storage=url).trials]
    assert states[2] == optuna.trial.TrialState.PRUNED  # 9.0 at epoch 1 vs median ~1.05
    assert states[3] == optuna.trial.TrialState.COMPLETE
    assert (tmp_path / "optuna" / "studies.db").is_file()
    info = summary(study)
    assert info["n_pruned"] == 1 and info["best_value"] == 0.5


def test_two_processes_run_trials_of_one_study_at_once(tmp_path):
    url = _url(tmp_path)
    open_study(url, "mamba2-shared", "mamba2", seed=0)  # the asset creates it; workers join
    script = textwrap.dedent(f"""
        import sys, time
        from models.tuning.study import open_study
        worker = sys.argv[1]
        study = open_study({url!r}, "mamba2-shared", "mamba2", seed=None)
        def objective(trial):
            trial.set_user_attr("worker", worker)
            x = trial.suggest_float("x", -1, 1)
            time.sleep(0.05)
            return x * x
        study.optimize(objective, n_trials=6)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, w], cwd=ROOT,
                              env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                              stderr=subprocess.PIPE, text=True) for w in ("a", "b")]
    errors = [p.communicate(timeout=240)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    trials = optuna.load_study(study_name="mamba2-shared", storage=url).trials
    assert len(trials) == 12
    assert {t.user_attrs["worker"] for t in trials} == {"a", "b"}
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)


def test_newest_best_reads_the_newest_study_of_the_family(tmp_path):
    url = _url(tmp_path)
    assert newest_best(url, "tft") is None
    assert not (tmp_path / "optuna").exists()  # reading never creates the database
    for name, value, created in [("tft-old", 0.1, "2026-01-01"), ("tft-new", 0.3, "2026-02-01")]:
        study = open_study(url, name, "tft", attrs={})
        study.set_user_attr("created_at", created)
        study.enqueue_trial({"hidden": 16})
        study.optimize(lambda t, v=value: v + 0 * t.suggest_categorical("hidden", [8, 16]), n_trials=1)
    other = open_study(url, "ppo-x", "ppo")
    other.optimize(lambda t: 5.0, n_trials=1)
    best = newest_best(url, "tft")
    assert best is not None and best.study == "tft-new" and best.value == pytest.approx(0.3)
    assert best.params == {"hidden": 16}
    assert newest_best(url, "mamba2") is None
    with pytest.raises(ValueError, match="tunes 'tft'"):
        open_study(url, "tft-new", "mamba2")


def test_every_family_has_a_space_with_config_field_names():
    for family in FAMILIES:
        trial = optuna.trial.FixedTrial({
            "hidden": 16, "heads": 2, "lstm_layers": 1, "var_width": 4, "dropout": 0.1,
            "learning_rate": 1e-3, "weight_decay": 1e-4, "n_layers": 2, "d_state": 32,
            "gamma": 0.5, "net_arch": "64-64", "exploration_fraction": 0.2,
            "target_update_interval": 1000, "n_steps": 256, "ent_coef": 0.01})
        params = suggest(family, trial, 16)
        assert "learning_rate" in params
    assert to_config_values({"net_arch": "128-128", "gamma": 0.5}) == {"net_arch": [128, 128], "gamma": 0.5}
    with pytest.raises(ValueError, match="no search space"):
        suggest("lstm", optuna.trial.FixedTrial({}))


def test_redact_hides_the_database_password():
    assert "secret" not in redact("postgresql://foxhunt:secret@db:5432/optuna")


def test_an_agent_trial_observes_the_forecasters_it_is_given(tmp_path):
    """A DQN trial trains on the forecasters' state (a compact observation, not the window),
    like the agent asset, and reports its validation reward to the study."""
    import torch

    from models.registry import build_model
    from models.tuning.objective import agent_trial
    from models.windows import DEFAULT_QUANTILES
    from tests.model_data import synthetic_training_data

    data = synthetic_training_data(n_rows={"train": 600, "validation": 200, "test": 200},
                                   n_observed=3, n_known=2, n_static=2, lookback=8, horizon=2,
                                   segment_length=200, seed=2)
    torch.manual_seed(0)
    tft = build_model("tft", {"n_static": 2, "n_observed": 3, "n_known": 2, "lookback": 8,
                              "horizon": 2, "quantiles": list(DEFAULT_QUANTILES), "hidden": 8,
                              "heads": 1, "lstm_layers": 1, "var_width": 2})
    seen = []
    study = open_study(_url(tmp_path), "dqn-observes", "dqn", seed=0)
    base = {"total_timesteps": 200, "learning_starts": 50, "eval_freq": 100, "net_arch": [8],
            "encoder_hidden": 8, "device": "cpu"}
    study.optimize(lambda trial: agent_trial(trial, "dqn", data, {}, base, on_eval=seen.append,
                                             observed=({"tft": tft}, {})), n_trials=1)
    assert study.trials[0].state == optuna.trial.TrialState.COMPLETE
    assert [p["timesteps"] for p in seen] == [100, 200]
    with pytest.raises(ValueError, match="forecasters"):  # the agent needs what it observes
        agent_trial(study.ask(), "dqn", data, {}, base)
