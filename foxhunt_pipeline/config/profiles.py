"""Named size profiles for training and evaluation defaults.

``FOXHUNT_PROFILE`` (default | demo | fast) is read into ``settings.Settings`` when the code
location or the CLI starts; every run's config then takes the active profile's sizes as
defaults: the UI's, the sensors', the schedule's and ``foxhunt materialize --profile``.
``default`` keeps each Config's full-size values."""

from __future__ import annotations

import difflib
from typing import Any

PROFILE_ENV = "FOXHUNT_PROFILE"

PROFILES: dict[str, dict[str, dict[str, Any]]] = {
    "default": {},
    "demo": {
        # sized for `foxhunt demo` (production model + 3 walk-forward folds per family) on 2
        # cores (the target is 10 minutes; 10-15 measured): TFT is the costlier forecaster,
        # the agents' steps the costliest of all (benchmarks/walk_forward_skill.py measures skill at these sizes)
        # TFT: 8 epochs at lr 2e-3 with weight decay 0.05 (benchmarks/tft_learning.py: at 4
        # epochs it had not left the plateau where it forecasts the unconditional quantiles)
        # one member of one LSTM layer and variable width 2 (~0.7x a 2-layer width-4 TFT's
        # training time: the per-variable work dominates); two members (members=2, a deep
        # ensemble) forecast with a lower pinball but doubled the TFT's share of the demo
        # (tft_model + tft_evaluation were 47% of it)
        # val_windows: epochs validate on a fixed sample of that many windows, so a year costs
        # an epoch what 12 days do (12 days hold ~5k validation windows: all of them scored)
        "tft_model": {"epochs": 8, "max_batches_per_epoch": 60, "hidden": 32, "batch_size": 64,
                      "learning_rate": 2e-3, "weight_decay": 0.05, "members": 1,
                      "lstm_layers": 1, "var_width": 2, "val_windows": 8192},
        "mamba2_model": {"epochs": 6, "max_batches_per_epoch": 60, "hidden": 32, "batch_size": 64,
                         "val_windows": 8192},
        # the ensemble's weights are fitted on the same fixed sample of validation windows
        "ensemble_model": {"val_windows": 8192},
        # the agents observe the forecasters' quantiles (a ~100-value state), not the window:
        # 20k steps take ~15 s
        # train_rows / val_rows: the most recent rows the agents learn and validate on (their
        # state is computed for those only): all of 12 days' (15.9k train, 5.4k validation
        # rows) and of every fold of a 20-day walk-forward (at most 11 train dates, ~30.4k
        # rows; 1 validation date, ~2.8k), so a year costs about what 20 days do (issue 41)
        "dqn_agent": {"total_timesteps": 20_000, "train_rows": 36_000, "val_rows": 8_000},
        # 20 rollouts of 2 envs x 512 steps
        "ppo_agent": {"total_timesteps": 20_480, "train_rows": 36_000, "val_rows": 8_000},
        # report_rows: the production model's own test-split report (plots, model card) on
        # its most recent rows; all of 12 days' ~2.6k
        "evaluation": {"latency_calls": 200, "bootstrap": 500, "report_rows": 12_000},
        # walk-forward: 3 folds x 2 test trade dates (12 calendar days hold ~9 trade dates)
        "walk_forward": {"folds": 3, "test_days": 2, "validation_days": 1},
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
