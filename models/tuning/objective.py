"""One trial: train on the train split, score on the validation split, never on a test
fold. Forecasters report the validation pinball loss after every epoch and agents their
validation mean reward after every evaluation, so the study's pruner can stop a trial
that is already behind the median of the earlier ones."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import optuna

from models import families
from models.registry import build_model, dataset_model_config
from models.training.loop import TrainConfig, train_fields, train_forecaster
from models.tuning.spaces import MODEL_FIELDS, to_config_values
from models.windows import TrainingData

Hook = Callable[[dict[str, Any]], None]


def pruning_hook(trial: optuna.Trial, value_key: str, step_key: str,
                 then: Hook | None = None) -> Hook:
    """A training callback that forwards the point to ``then``, reports ``point[value_key]``
    at step ``point[step_key]`` and raises ``optuna.TrialPruned`` when the pruner says so."""

    def hook(point: dict[str, Any]) -> None:
        if then is not None:
            then(point)
        step, value = int(point[step_key]), float(point[value_key])
        trial.report(value, step)
        if trial.should_prune():
            raise optuna.TrialPruned(f"{value_key} {value:.6g} at {step_key} {step} is behind "
                                     "the median of earlier trials")

    return hook


def forecaster_trial(trial: optuna.Trial, family: str, data: TrainingData,
                     params: dict[str, Any], base_model: dict[str, Any], train: TrainConfig, *,
                     device: Any = "cpu", autocast_dtype: Any = None,
                     on_epoch_end: Hook | None = None) -> float:
    """Best validation pinball loss of ``family`` trained with ``params`` (model fields
    over ``base_model``, ``learning_rate`` / ``weight_decay`` over ``train``)."""
    model_params = {k: v for k, v in params.items() if k in MODEL_FIELDS[family]}
    model = build_model(family, {**dataset_model_config(family, data.meta), **base_model, **model_params})
    cfg = replace(train, **train_fields({k: float(params[k]) for k in ("learning_rate", "weight_decay")
                                         if k in params}))
    result = train_forecaster(model, data, cfg, device=device, autocast_dtype=autocast_dtype,
                              on_epoch_end=pruning_hook(trial, "val_loss", "epoch", on_epoch_end))
    return float(result.best_val_loss)


def agent_trial(trial: optuna.Trial, family: str, data: TrainingData, params: dict[str, Any],
                base: dict[str, Any], on_eval: Hook | None = None,
                observed: tuple[dict[str, Any], dict[str, Any]] | None = None) -> float:
    """Final validation mean reward of ``family`` (dqn | ppo) trained with ``params`` over
    the agent config fields ``base`` (``models.agents.train.DQNConfig`` / ``PPOConfig``),
    observing ``observed`` = (forecasters, their training configs)."""
    fam = families.family(family)
    fit = fam.train_function()
    config = fam.config_class().from_dict({**base, **to_config_values(params)})
    forecasters, train_configs = observed or (None, None)
    result = fit(data, config, on_eval=pruning_hook(trial, "mean_reward", "timesteps", on_eval),
                 eval_split="validation", forecasters=forecasters,
                 forecaster_train_configs=train_configs)
    return float(result.final_val_mean_reward)
