"""What every evaluation scores: a ``Candidate`` is a name, a kind and a ``fit`` that trains
on one fold's data and returns its predictor. The naive baselines every model is compared
with (flat, buy-and-hold, momentum, climatology) are candidates like the models
(``models.evaluation.family_candidates``), built here once and named ``baseline:<name>``
for both the walk-forward and the production model's own test-split report
(``models.evaluation.evaluate``), so the two never disagree on a baseline's positions or
name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from models.climatology import climatology_quantiles
from models.evaluation.backtest import decision_rows
from models.evaluation.baselines import (
    buy_and_hold_positions,
    climatology_forecast,
    flat_positions,
    momentum_positions,
)
from models.lightgbm import model as lightgbm_model
from models.windows import TrainingData

#: fit(fold data) -> predict(fold data) -> quantiles [W, H, Q] (target-scaled) for a
#: forecaster, or positions in [-1, 1] per test window (or per test row) otherwise.
Fit = Callable[[TrainingData], Callable[[TrainingData], np.ndarray]]

#: What names a naive baseline (rows with it are ``family = "baseline"`` in model_evaluations).
BASELINE_PREFIX = "baseline:"


@dataclass(frozen=True)
class Candidate:
    name: str  # "foxhunt-tft", "baseline:lightgbm", ...
    kind: Literal["forecaster", "positions"]
    fit: Fit


def trading_baselines(momentum_lookbacks: Sequence[int] = (1,)) -> list[Candidate]:
    """flat, buy-and-hold and momentum: no fitting, one position per test window (its
    decision row) from past data only."""
    def constant(positions: Callable[[int], np.ndarray]) -> Fit:
        def fit(_: TrainingData) -> Callable[[TrainingData], np.ndarray]:
            return lambda d: positions(d.splits["test"].n_windows)
        return fit

    def momentum(lb: int) -> Fit:
        def fit(_: TrainingData) -> Callable[[TrainingData], np.ndarray]:
            def predict(d: TrainingData) -> np.ndarray:
                s = d.splits["test"]
                return momentum_positions(s, decision_rows(s.window_starts, d.lookback), lb)
            return predict
        return fit

    out = [Candidate(f"{BASELINE_PREFIX}flat", "positions", constant(flat_positions)),
           Candidate(f"{BASELINE_PREFIX}buy_and_hold", "positions",
                     constant(buy_and_hold_positions))]
    out += [Candidate(f"{BASELINE_PREFIX}momentum_{lb}", "positions", momentum(lb))
            for lb in momentum_lookbacks]
    return out


def climatology_candidate() -> Candidate:
    """The train split's unconditional quantiles, the same forecast for every test window."""
    def fit(train: TrainingData) -> Callable[[TrainingData], np.ndarray]:
        clim = climatology_quantiles(train, list(train.meta["quantiles"]))
        return lambda d: climatology_forecast(clim, d.splits["test"].n_windows)
    return Candidate(f"{BASELINE_PREFIX}climatology", "forecaster", fit)


def naive_baselines(momentum_lookbacks: Sequence[int] = (1,)) -> list[Candidate]:
    """Every naive baseline: the trading ones, then the climatology."""
    return [*trading_baselines(momentum_lookbacks), climatology_candidate()]


def lightgbm_candidate(config: lightgbm_model.LightGBMConfig | None = None, *,
                       name: str = "foxhunt-lightgbm") -> Candidate:
    """The LightGBM family: gradient-boosted quantiles on the same window features, refitted
    on each fold with ``config``."""
    config = config or lightgbm_model.LightGBMConfig()

    def fit(train: TrainingData) -> Callable[[TrainingData], np.ndarray]:
        model = lightgbm_model.fit(train, config)
        return lambda d: model.predict(d.splits["test"])
    return Candidate(name, "forecaster", fit)
