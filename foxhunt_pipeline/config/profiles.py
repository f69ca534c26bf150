"""Named size profiles for training and evaluation defaults.

``FOXHUNT_PROFILE`` (default | demo | fast) is read when the code location loads, so the
same small settings apply to every run it starts: the UI's, the sensors', the schedule's and
``foxhunt materialize --profile``. ``default`` keeps each Config's full-size values."""

from __future__ import annotations

import os
from typing import Any

PROFILE_ENV = "FOXHUNT_PROFILE"

PROFILES: dict[str, dict[str, dict[str, Any]]] = {
    "default": {},
    "demo": {
        "tft_model": {"epochs": 6, "max_batches_per_epoch": 60, "hidden": 32, "batch_size": 64},
        "mamba2_model": {"epochs": 6, "max_batches_per_epoch": 60, "hidden": 32, "batch_size": 64},
        "dqn_agent": {"total_timesteps": 20_000},
        "ppo_agent": {"total_timesteps": 20_000},
        "evaluation": {"latency_calls": 200, "bootstrap": 500},
        "tuning": {"n_trials": 8, "timeout_s": 600, "epochs": 2, "max_batches_per_epoch": 30,
                   "total_timesteps": 5_000},
    },
    "fast": {
        "tft_model": {"epochs": 2, "max_batches_per_epoch": 15, "hidden": 16, "batch_size": 64,
                      "var_width": 4, "heads": 2, "lstm_layers": 1},
        "mamba2_model": {"epochs": 2, "max_batches_per_epoch": 15, "hidden": 16, "batch_size": 64,
                         "n_layers": 1},
        "dqn_agent": {"total_timesteps": 2_000},
        "ppo_agent": {"total_timesteps": 2_048},
        "evaluation": {"latency_calls": 30, "bootstrap": 100},
        "tuning": {"n_trials": 5, "timeout_s": 300, "epochs": 1, "max_batches_per_epoch": 5,
                   "total_timesteps": 1_000},
    },
}


def active_profile() -> str:
    name = os.environ.get(PROFILE_ENV, "default") or "default"
    if name not in PROFILES:
        raise ValueError(f"{PROFILE_ENV}={name!r} is not a profile; choose one of {', '.join(PROFILES)}")
    return name


def default(section: str, key: str, fallback: Any) -> Any:
    """The active profile's value for ``section.key``, else ``fallback`` (the full-size value)."""
    return PROFILES[active_profile()].get(section, {}).get(key, fallback)
