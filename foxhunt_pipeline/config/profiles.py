"""Named size profiles for training and evaluation defaults.

``FOXHUNT_PROFILE`` (default | demo | fast) is read into ``settings.Settings`` when the code
location or the CLI starts; every run's config then takes the active profile's sizes as
defaults: the UI's, the sensors', the schedule's and ``foxhunt materialize --profile``.
``default`` keeps each Config's full-size values."""

from __future__ import annotations

import difflib
from typing import Any

PROFILE_ENV = "FOXHUNT_PROFILE"
#: calendar days `foxhunt demo` generates: enough trade dates (~12) for the demo profile's
#: 2 folds x 3 test dates to train its first fold on 5
DEMO_DAYS = 16

PROFILES: dict[str, dict[str, dict[str, Any]]] = {
    "default": {},
    "demo": {
        # sized for `foxhunt demo` (production model + 2 walk-forward folds per family) on 2
        # cores (the target is 10 minutes; 8.8 measured): TFT is the costlier forecaster,
        # the agents' steps the costliest of all (benchmarks/walk_forward_skill.py measures skill at these sizes)
        # TFT: 8 epochs at lr 2e-3 with weight decay 0.05 (benchmarks/tft_learning.py: at 4
        # epochs it had not left the plateau where it forecasts the unconditional quantiles)
        # one member of one LSTM layer and variable width 2 (~0.7x a 2-layer width-4 TFT's
        # training time: the per-variable work dominates); two members (members=2, a deep
        # ensemble) forecast with a lower pinball but doubled the TFT's share of the demo
        # (tft_model + tft_evaluation were 47% of it)
        # val_windows: epochs validate on a fixed sample of that many windows, so a year costs
        # an epoch what the demo does (8192 cost ~2.5 s more per production TFT epoch there;
        # a fold's one validation date holds fewer, all scored)
        "tft_model": {"epochs": 8, "max_batches_per_epoch": 60, "hidden": 32, "batch_size": 64,
                      "learning_rate": 2e-3, "weight_decay": 0.05, "members": 1,
                      "lstm_layers": 1, "var_width": 2, "val_windows": 4096},
        "mamba2_model": {"epochs": 6, "max_batches_per_epoch": 60, "hidden": 32, "batch_size": 64,
                         "val_windows": 4096},
        # the ensemble's weights are fitted on the same fixed sample of validation windows
        "ensemble_model": {"val_windows": 8192},
        # the agents observe the forecasters' quantiles (a ~100-value state), not the window;
        # DQN fine-tunes what it imitated for 12k steps (20k cost ~8 s more per training)
        # train_rows / val_rows: the most recent rows the agents learn and validate on (their
        # state is computed for those only): all of the demo's and of every fold of a 20-day
        # walk-forward (at most 11 train dates, ~30.4k rows; 1 validation date, ~2.8k), so a
        # year costs about what 20 days do (issue 41)
        "dqn_agent": {"total_timesteps": 12_000, "train_rows": 36_000, "val_rows": 8_000},
        # 20 rollouts of 2 envs x 512 steps
        "ppo_agent": {"total_timesteps": 20_480, "train_rows": 36_000, "val_rows": 8_000},
        # report_rows: the production model's own test-split report (plots, model card) on
        # its most recent rows; all of the demo's
        "evaluation": {"latency_calls": 200, "bootstrap": 500, "report_rows": 12_000},
        # walk-forward: 2 folds x 3 test trade dates; `foxhunt demo` generates 16 calendar
        # days (~12 trade dates), so its first fold trains on 5. Measured on seed 7 (issue 37):
        # 3 folds x 2 on 12 days cost 877 s; 2 x 3 on 12 days trained the first fold on 2
        # dates and promoted nothing; 2 x 2 tested 4 dates (10k bars): CIs too wide to promote
        # (ensemble +41.5 [-6.45, +101] against buy-and-hold)
        "walk_forward": {"folds": 2, "test_days": 3, "validation_days": 1},
        # CPU profiles: half precision runs slower than fp32 on a CPU (1.3-3.6x the batch-32
        # latency in the demo), so it is never recommended there; made on a GPU (default)
        "quantization": {"precisions": ["fp32", "int8"]},
        "lightgbm": {"fit_quantiles": [0.1, 0.5, 0.9], "num_boost_round": 100,
                     "max_train_rows": 20_000},
        "tuning": {"n_trials": 8, "timeout_s": 600, "epochs": 2, "max_batches_per_epoch": 30,
                   "total_timesteps": 5_000},
    },
    "fast": {
        "tft_model": {"epochs": 2, "max_batches_per_epoch": 15, "hidden": 16, "batch_size": 64,
                      "var_width": 4, "heads": 2, "lstm_layers": 1, "val_windows": 4096},
        "mamba2_model": {"epochs": 2, "max_batches_per_epoch": 15, "hidden": 16, "batch_size": 64,
                         "n_layers": 1, "val_windows": 4096},
        "ensemble_model": {"val_windows": 4096},
        # the agents' state (both forecasters' quantiles per row) was two thirds of
        # dqn_evaluation at 20k train rows: a smoke test needs a few thousand
        "dqn_agent": {"total_timesteps": 2_000, "train_rows": 5_000, "val_rows": 2_500},
        "ppo_agent": {"total_timesteps": 2_048, "train_rows": 5_000, "val_rows": 2_500},
        "evaluation": {"latency_calls": 30, "bootstrap": 100, "report_rows": 6_000},
        "walk_forward": {"folds": 2, "test_days": 1, "validation_days": 1},
        "quantization": {"precisions": ["fp32", "int8"]},
        "lightgbm": {"fit_quantiles": [0.1, 0.5, 0.9], "num_boost_round": 60,
                     "max_train_rows": 10_000},
        "tuning": {"n_trials": 5, "timeout_s": 300, "epochs": 1, "max_batches_per_epoch": 5,
                   "total_timesteps": 1_000},
    },
}


class ProfileError(ValueError):
    """A profile sets a size no config reads (a misspelt section or key)."""


#: section -> the keys some run config reads from a profile (``declare``, called by each
#: sized Config field as its module is imported)
_DECLARED: dict[str, set[str]] = {}


def declare(section: str, key: str) -> None:
    """Record that a config field takes ``section.key`` from the active profile."""
    _DECLARED.setdefault(section, set()).add(key)


def check_profiles(profiles: dict[str, dict[str, dict[str, Any]]] | None = None) -> None:
    """Every ``section.key`` of every profile is one that a config reads: without this check a
    misspelt key silently falls back to the full-size default. Called when the code location
    starts, after the asset modules declared their fields."""
    problems = []
    for name, sections in (PROFILES if profiles is None else profiles).items():
        for section, sizes in sections.items():
            known = _DECLARED.get(section)
            if known is None:
                hint = difflib.get_close_matches(section, list(_DECLARED), n=1)
                problems.append(f"{name}: section {section!r} is read by no config"
                                + (f" (did you mean {hint[0]!r}?)" if hint else ""))
                continue
            for key in sizes:
                if key not in known:
                    hint = difflib.get_close_matches(key, sorted(known), n=1)
                    problems.append(f"{name}: {section}.{key} is read by no config"
                                    + (f" (did you mean {section}.{hint[0]}?)" if hint else
                                       f" (it reads {', '.join(sorted(known))})"))
    if problems:
        raise ProfileError("size profiles (foxhunt_pipeline/config/profiles.py): "
                           + "; ".join(problems))
