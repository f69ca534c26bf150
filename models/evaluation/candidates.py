"""What the walk-forward scores: a ``Candidate`` is a name, a kind and a ``fit`` that trains
on one fold's data and returns its predictor; the baselines every model is compared with
(flat, buy-and-hold, momentum, climatology) are candidates like the models
(``models.evaluation.family_candidates``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from models.climatology import climatology_quantiles
from models.evaluation.backtest import decision_rows
from models.evaluation.baselines import (
    climatology_forecast,
    momentum_positions,
)
from models.lightgbm import model as lightgbm_model
from models.windows import TrainingData

#: fit(fold data) -> predict(fold data) -> quantiles [W, H, Q] (target-scaled) for a
#: forecaster, or positions in [-1, 1] per test window (or per test row) otherwise.
Fit = Callable[[TrainingData], Callable[[TrainingData], np.ndarray]]


@dataclass(frozen=True)
class Candidate:
    name: str  # "foxhunt-tft", "baseline:lightgbm", ...
    kind: Literal["forecaster", "positions"]
    fit: Fit


def trading_baselines(momentum_lookbacks: Sequence[int] = (1,)) -> list[Candidate]:
    """flat, buy-and-hold and momentum: no fitting, positions from past data only."""
    def constant(value: float) -> Fit:
        def fit(_: TrainingData) -> Callable[[TrainingData], np.ndarray]:
            return lambda d: np.full(d.splits["test"].n_windows, value)
        return fit

    def momentum(lb: int) -> Fit:
        def fit(_: TrainingData) -> Callable[[TrainingData], np.ndarray]:
            def predict(d: TrainingData) -> np.ndarray:
                s = d.splits["test"]
                return momentum_positions(s, decision_rows(s.window_starts, d.lookback), lb)
            return predict
        return fit

    out = [Candidate("baseline:flat", "positions", constant(0.0)),
           Candidate("baseline:buy_and_hold", "positions", constant(1.0))]
    out += [Candidate(f"baseline:momentum_{lb}", "positions", momentum(lb))
            for lb in momentum_lookbacks]
    return out


def climatology_candidate() -> Candidate:
    def fit(train: TrainingData) -> Callable[[TrainingData], np.ndarray]:
        clim = climatology_quantiles(train, list(train.meta["quantiles"]))
        return lambda d: climatology_forecast(clim, d.splits["test"].n_windows)
    return Candidate("baseline:climatology", "forecaster", fit)


def lightgbm_candidate(config: lightgbm_model.LightGBMConfig | None = None, *,
                       name: str = "foxhunt-lightgbm") -> Candidate:
    """The LightGBM family: gradient-boosted quantiles on the same window features, refitted
    on each fold with ``config``."""
    config = config or lightgbm_model.LightGBMConfig()

    def fit(train: TrainingData) -> Callable[[TrainingData], np.ndarray]:
        model = lightgbm_model.fit(train, config)
        return lambda d: model.predict(d.splits["test"])
    return Candidate(name, "forecaster", fit)
