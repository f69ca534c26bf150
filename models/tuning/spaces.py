"""The search space of each family, sampled by TPE.

Parameter names are the training Config's field names, so the best trial's parameters
drop straight into ``tft_model`` / ``mamba2_model`` / ``dqn_agent`` / ``ppo_agent``
(``to_config_values`` decodes the few that Optuna cannot hold natively, e.g. ``net_arch``).

Forecasters (TFT, Mamba-2): width ``hidden`` in {base/2, base, 2*base} around the
profile's size (so the ``fast`` profile searches tiny models and ``default`` full ones),
depth (``lstm_layers`` 1-2 / ``n_layers`` 1-3), TFT ``heads`` in {1, 2, 4} and variable
selection width ``var_width`` in {2, 4, 8}, Mamba-2 ``d_state`` in {16, 32, 64},
``dropout`` in [0, 0.3], ``learning_rate`` log-uniform in [1e-4, 1e-2], ``weight_decay``
log-uniform in [1e-6, 1e-2]. The lookback is the dataset's (windows are cut when the
dataset is built, so a study cannot vary it without rebuilding ``training_dataset``).

Agents (stable-baselines3): ``learning_rate`` log-uniform in [1e-5, 3e-3], ``gamma`` in
[0.3, 0.99] (rewards are immediate; a long horizon only pays through costs), ``net_arch``
in {64, 64-64, 128-128}; DQN ``exploration_fraction`` in [0.05, 0.5] and
``target_update_interval`` in {250, 1000, 2000}; PPO ``n_steps`` in {128, 256, 512} and
``ent_coef`` in [0, 0.05].
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna

from models import families

#: the families with a search space
FAMILIES = families.names(tunable=True)
NET_ARCHS = ("64", "64-64", "128-128")

#: per family: fields that go into the model's config (the rest are training settings)
MODEL_FIELDS = {
    "tft": ("hidden", "heads", "lstm_layers", "dropout", "var_width"),
    "mamba2": ("hidden", "n_layers", "d_state", "dropout"),
}


def _widths(base: int) -> list[int]:
    return sorted({max(4, base // 2), max(4, base), max(4, base * 2)})


def _forecaster_common(trial: optuna.Trial) -> dict[str, Any]:
    return {
        "dropout": trial.suggest_float("dropout", 0.0, 0.3),
        "learning_rate": trial.suggest_float("learning_rate", 1e-4, 1e-2, log=True),
        "weight_decay": trial.suggest_float("weight_decay", 1e-6, 1e-2, log=True),
    }


def suggest_tft(trial: optuna.Trial, base_hidden: int) -> dict[str, Any]:
    return {
        "hidden": trial.suggest_categorical("hidden", _widths(base_hidden)),
        "heads": trial.suggest_categorical("heads", [1, 2, 4]),
        "lstm_layers": trial.suggest_int("lstm_layers", 1, 2),
        "var_width": trial.suggest_categorical("var_width", [2, 4, 8]),
        **_forecaster_common(trial),
    }


def suggest_mamba2(trial: optuna.Trial, base_hidden: int) -> dict[str, Any]:
    return {
        "hidden": trial.suggest_categorical("hidden", _widths(base_hidden)),
        "n_layers": trial.suggest_int("n_layers", 1, 3),
        "d_state": trial.suggest_categorical("d_state", [16, 32, 64]),
        **_forecaster_common(trial),
    }


def _agent_common(trial: optuna.Trial) -> dict[str, Any]:
    return {
        "learning_rate": trial.suggest_float("learning_rate", 1e-5, 3e-3, log=True),
        "gamma": trial.suggest_float("gamma", 0.3, 0.99),
        "net_arch": trial.suggest_categorical("net_arch", list(NET_ARCHS)),
    }


def suggest_dqn(trial: optuna.Trial, base_hidden: int = 0) -> dict[str, Any]:
    return {
        **_agent_common(trial),
        "exploration_fraction": trial.suggest_float("exploration_fraction", 0.05, 0.5),
        "target_update_interval": trial.suggest_categorical("target_update_interval",
                                                            [250, 1000, 2000]),
    }


def suggest_ppo(trial: optuna.Trial, base_hidden: int = 0) -> dict[str, Any]:
    return {
        **_agent_common(trial),
        "n_steps": trial.suggest_categorical("n_steps", [128, 256, 512]),
        "ent_coef": trial.suggest_float("ent_coef", 0.0, 0.05),
    }


SPACES: dict[str, Callable[[optuna.Trial, int], dict[str, Any]]] = {
    "tft": suggest_tft, "mamba2": suggest_mamba2, "dqn": suggest_dqn, "ppo": suggest_ppo,
}


def suggest(family: str, trial: optuna.Trial, base_hidden: int = 64) -> dict[str, Any]:
    """The trial's parameters for ``family``, as Optuna stores them."""
    if family not in SPACES:
        raise ValueError(f"no search space for {family!r}; families: {', '.join(FAMILIES)}")
    return SPACES[family](trial, base_hidden)


def to_config_values(params: dict[str, Any]) -> dict[str, Any]:
    """Stored parameters as training Config values (``net_arch`` "64-64" -> [64, 64])."""
    out = dict(params)
    if isinstance(out.get("net_arch"), str):
        out["net_arch"] = [int(x) for x in out["net_arch"].split("-")]
    return out
