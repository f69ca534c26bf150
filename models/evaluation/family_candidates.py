"""Walk-forward candidates for the model families: each fold trains a fresh model with the
production model's configuration, then predicts the fold's test windows."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from models.evaluation.walk_forward import Candidate
from models.windows import TrainingData


def forecaster_candidate(name: str, model_type: str, model_config: Mapping[str, Any],
                         train_config: Any, *, device: str = "cpu") -> Candidate:
    """``model_config`` as saved in the checkpoint, ``train_config`` a ``TrainConfig``."""
    import torch

    from models.evaluation.evaluate import predict_windows
    from models.registry import build_model
    from models.training.loop import train_forecaster

    def fit(train: TrainingData) -> Callable[[TrainingData], np.ndarray]:
        torch.manual_seed(int(getattr(train_config, "seed", 0)))
        model = build_model(model_type, dict(model_config))
        train_forecaster(model, train, train_config, device=device)
        model = model.to(device).eval()

        def predict(d: TrainingData) -> np.ndarray:
            return predict_windows(name, model, d.window_dataset("test"), device=device,
                                   expect_shape=(d.horizon, len(d.meta["quantiles"])))
        return predict
    return Candidate(name, "forecaster", fit)


def agent_candidate(name: str, algo: str, agent_config: Any) -> Candidate:
    """A DQN / PPO agent (``models.agents.train`` config); positions from the batched replay."""
    from models.agents import train as agents
    from models.agents.trading_env import evaluate_positions

    train_fn = agents.train_dqn if algo == "dqn" else agents.train_ppo

    def fit(train: TrainingData) -> Callable[[TrainingData], np.ndarray]:
        policy = agents.policy_net_from_model(train_fn(train, agent_config).model)

        def predict(d: TrainingData) -> np.ndarray:
            replay = evaluate_positions(policy, d, "test")
            pos = np.zeros(d.splits["test"].n_rows, dtype=np.float64)
            pos[np.asarray(replay["rows"], dtype=np.int64)] = replay["positions"]
            return pos
        return predict
    return Candidate(name, "positions", fit)


def ensemble_candidate(name: str, members: Mapping[str, Candidate], *,
                       include_climatology: bool = True) -> Candidate:
    """The ensemble as ``ensemble_model`` builds it, refitted per fold: each member forecaster
    trained on the fold, its weights fitted on the fold's validation split (never its test
    split) by ``models.ensemble.weights``, the same weighted quantiles on the test windows."""
    from models.ensemble.weights import combine_quantiles, fit_quantile_weights
    from models.training.loop import climatology_quantiles, scaled_targets

    def on_validation(d: TrainingData) -> TrainingData:
        return TrainingData(meta=d.meta, splits={**d.splits, "test": d.splits["validation"]})

    def fit(train: TrainingData) -> Callable[[TrainingData], np.ndarray]:
        quantiles = list(train.meta["quantiles"])
        fitted = {n: m.fit(train) for n, m in members.items()}
        val = on_validation(train)
        preds = {n: predict(val) for n, predict in fitted.items()}
        clim = climatology_quantiles(train, tuple(quantiles)) if include_climatology else None
        if clim is not None:
            preds["climatology"] = clim
        weights = fit_quantile_weights(preds, scaled_targets(train.window_dataset("validation")),
                                       quantiles).weights

        def predict(d: TrainingData) -> np.ndarray:
            out = {n: p(d) for n, p in fitted.items()}
            if clim is not None:
                out["climatology"] = clim
            return combine_quantiles(out, weights)
        return predict
    return Candidate(name, "forecaster", fit)
