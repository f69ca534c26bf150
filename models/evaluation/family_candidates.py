"""Walk-forward candidates for the model families: each fold trains a fresh model with the
production model's configuration, then predicts the fold's test windows.

The ``*_from_*`` builders are the registry's (``models.families``) ``candidate`` entries:
``(family, checkpoint, settings, *, device, cache_dir)``, where ``settings`` is what the
checkpoint does not carry itself (a forecaster's ``TrainConfig`` from an older checkpoint,
an agent's config, the ensemble's members)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from models.agents import train as agents
from models.agents.state import FORECAST_BATCH, saved_forecasters
from models.agents.state import forecasts as row_forecasts
from models.agents.trading_env import evaluate_positions
from models.ensemble.weights import combine_quantiles, fit_quantile_weights
from models.evaluation.candidates import Candidate, lightgbm_candidate
from models.families import Family, family
from models.lightgbm.model import LightGBMConfig
from models.registry import build_model, get_model_class
from models.training.checkpoint import (
    checkpoint_file,
    load_checkpoint,
    read_checkpoint_meta,
    save_checkpoint,
    sidecar_file,
)
from models.training.loop import (
    TrainConfig,
    climatology_quantiles,
    scaled_targets,
    train_forecaster,
)
from models.windows import ARRAYS, TrainingData, hash_array


def fold_model_key(model_type: str, model_config: Mapping[str, Any], train_config: Any,
                   train: TrainingData) -> str:
    """What determines a fold's trained forecaster: its architecture, its training config and
    the fold's train and validation arrays (seeded training gives the same weights). The
    config is keyed as the model sees it (defaults filled in), so a caller that spells out a
    default and one that leaves it out share the model."""
    config = get_model_class(model_type)[0].from_dict(dict(model_config)).to_dict()
    h = hashlib.sha256(json.dumps([model_type, config, _plain(train_config)],
                                  sort_keys=True, default=str).encode())
    for split in ("train", "validation"):
        part = train.splits.get(split)
        if part is None:
            continue
        for name in ARRAYS:  # the buffer itself, a block at a time: never a year's copy
            hash_array(h, getattr(part, name))
    return h.hexdigest()[:32]


def prune_fold_models(cache_dir: Path, keep_days: float = 14.0) -> None:
    """Drop cached fold models not written for ``keep_days``: the cache serves the
    evaluations of one dataset version, not history."""
    cutoff = time.time() - keep_days * 86_400
    for entry in cache_dir.iterdir():
        if entry.is_dir() and not entry.name.startswith(".") and entry.stat().st_mtime < cutoff:
            shutil.rmtree(entry, ignore_errors=True)


def _plain(config: Any) -> Any:
    return dataclasses.asdict(config) if dataclasses.is_dataclass(config) else config


FoldForecaster = Callable[[TrainingData], nn.Module]


def fold_forecaster(model_type: str, model_config: Mapping[str, Any], train_config: Any, *,
                    device: str = "cpu", cache_dir: Path | None = None) -> FoldForecaster:
    """``trained(fold data) -> model``: a fresh forecaster with this configuration trained on
    the fold's train split (early stopping on its validation split). With ``cache_dir`` each
    fold's model is kept there under ``fold_model_key``, so the ensemble's and the agents'
    walk-forwards reuse the forecasters' fold models instead of training them again (and a
    re-run on the same data and configuration trains nothing)."""
    def trained(train: TrainingData) -> nn.Module:
        path = None
        if cache_dir is not None:
            path = Path(cache_dir) / f"{model_type}-{fold_model_key(model_type, model_config, train_config, train)}"
            if sidecar_file(checkpoint_file(path)).exists():  # written last: complete
                return load_checkpoint(path, device=device)[0]
        torch.manual_seed(int(getattr(train_config, "seed", 0)))
        model = build_model(model_type, dict(model_config))
        train_forecaster(model, train, train_config, device=device)
        if path is not None:
            save_checkpoint(path, model, model_type=model_type, config=dict(model_config))
            prune_fold_models(Path(cache_dir))
        return model

    return trained


def forecaster_candidate(name: str, model_type: str, model_config: Mapping[str, Any],
                         train_config: Any, *, device: str = "cpu",
                         cache_dir: Path | None = None) -> Candidate:
    """``model_config`` as saved in the checkpoint, ``train_config`` a ``TrainConfig``; each
    fold's model comes from ``fold_forecaster`` (cached under ``cache_dir``)."""
    trained = fold_forecaster(model_type, model_config, train_config, device=device,
                              cache_dir=cache_dir)

    def fit(train: TrainingData) -> Callable[[TrainingData], np.ndarray]:
        model = trained(train).to(device).eval()

        def predict(d: TrainingData) -> np.ndarray:
            # the fold model's forecast at every test row, as the agents observe it: the
            # agents' walk-forward state and the ensemble's members then read these same
            # forecasts (forecast_memo keeps them on disk) instead of computing them again
            part = d.splits["test"]
            per_row = row_forecasts(model, part, d.lookback, d.horizon, FORECAST_BATCH)
            return per_row[np.asarray(part.window_starts, np.int64) + d.lookback - 1]
        return predict
    return Candidate(name, "forecaster", fit)


def agent_candidate(name: str, train_fn: Callable[..., Any], agent_config: Any,
                    forecasters: Mapping[str, FoldForecaster] | None = None) -> Candidate:
    """A DQN / PPO agent (``train_fn`` with its ``models.agents`` config) observing the
    fold's own ``forecasters`` (each trained on the fold's train split, never on its test
    period); positions from the batched replay."""
    # with keep_best the validation backtests choose the policy (on the fold's validation
    # split); without it they are only a progress report, so a fold model skips them
    every = agents.validation_every(agent_config.total_timesteps, agent_config.eval_freq)
    quiet = dataclasses.replace(agent_config, eval_freq=every if agent_config.keep_best else 0)

    def fit(train: TrainingData) -> Callable[[TrainingData], np.ndarray]:
        models = {n: trained(train) for n, trained in (forecasters or {}).items()}
        policy = agents.policy_net_from_model(train_fn(train, quiet, forecasters=models).model)

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


# --- the registry's builders: the production model's configuration, retrained per fold ---


def forecaster_from_checkpoint(fam: Family, checkpoint: Path, settings: TrainConfig | None, *,
                               device: str = "cpu", cache_dir: Path | None = None) -> Candidate:
    """A torch forecaster with its checkpoint's architecture and training config (``settings``
    for a checkpoint that carries none)."""
    meta = read_checkpoint_meta(checkpoint)
    saved = meta.get("train_config")
    train = TrainConfig.from_dict(saved) if saved is not None else settings
    if train is None:
        raise ValueError(f"{checkpoint}: no training config saved with the model or logged")
    return forecaster_candidate(fam.registered_name, meta["model_type"], meta["config"], train,
                                device=device, cache_dir=cache_dir)


def agent_from_checkpoint(fam: Family, checkpoint: Path | None, settings: Any, *,
                          device: str = "cpu", cache_dir: Path | None = None) -> Candidate:
    """An agent with ``settings`` (its ``DQNConfig`` / ``PPOConfig``), observing the
    forecasters it was trained beside, each retrained on the fold with its own training
    config (and shared with their own walk-forward through the fold-model cache)."""
    observed = {
        n: fold_forecaster(f["model_type"], f["config"], TrainConfig.from_dict(f["train_config"]),
                           device=device, cache_dir=cache_dir)
        for n, f in (saved_forecasters(checkpoint) if checkpoint else {}).items()
        if f.get("train_config") is not None}
    return agent_candidate(fam.registered_name, fam.train_function(), settings, observed)


def ensemble_from_members(fam: Family, checkpoint: Path, settings: Mapping[str, Any], *,
                          device: str = "cpu", cache_dir: Path | None = None) -> Candidate:
    """The ensemble refitted per fold from ``settings["members"]`` (member family ->
    ``(checkpoint, TrainConfig or None)``) and ``settings["include_climatology"]``."""
    members = {family(m).registered_name: forecaster_from_checkpoint(
        family(m), Path(ckpt), train, device=device, cache_dir=cache_dir)
        for m, (ckpt, train) in dict(settings.get("members") or {}).items()}
    if not members:
        raise ValueError("the ensemble has no member forecaster to retrain")
    return ensemble_candidate(fam.registered_name, members,
                              include_climatology=bool(settings.get("include_climatology", True)))


def lightgbm_from_artifact(fam: Family, checkpoint: Path, settings: LightGBMConfig | None, *,
                           device: str = "cpu", cache_dir: Path | None = None) -> Candidate:
    """LightGBM refitted per fold with the config its artifact records (``settings`` if
    given)."""
    where = Path(checkpoint)
    meta = json.loads(((where.parent if where.is_file() else where) / "meta.json").read_text())
    config = settings or LightGBMConfig.from_dict(meta.get("lightgbm_config") or {})
    return lightgbm_candidate(config, name=fam.registered_name)


def production_candidate(name: str, checkpoint: Path | None, settings: Any, *,
                         device: str = "cpu", cache_dir: Path | None = None) -> Candidate:
    """Family ``name``'s walk-forward candidate, built by its registry entry."""
    fam = family(name)
    return fam.resolve("candidate")(fam, checkpoint, settings, device=device, cache_dir=cache_dir)
