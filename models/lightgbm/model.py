"""LightGBM quantile forecaster: one LightGBM quantile regressor per horizon and quantile.

Why: it is what a quant platform tries first, so a deep forecaster has to beat it to be
worth its cost; and it is a family of its own (``foxhunt-lightgbm``), deployable like the
others, because it is often as good. It sees exactly what the forecasters see, flattened: for each window
(``models.windows``) the last history bar's observed features (optionally also their mean
over the lookback), the known inputs at the decision bar and at the end of the horizon, and
the static inputs. The observed library already carries lags and windows up to 240 bars,
so no more lags are added.

Targets are in the forecasters' units (targets / ``target_scale``). It trains on the train
split with early stopping on the validation split. ``predict(split)`` returns what
``models.evaluation.evaluate.predict_windows`` returns for a forecaster on that split:
one row per window in ``window_starts`` order, shape [N, H, Q], quantiles sorted so they
never cross; calling the model as ``model(static, observed, known)`` on window batches
gives the same numbers, so ``evaluate_forecaster`` can score it like any forecaster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import lightgbm as lgb
import numpy as np

from models.windows import SplitArrays, TrainingData, take_rows

#: LightGBM parameters unless overridden through ``fit_lightgbm_quantiles(**params)``.
DEFAULT_PARAMS: dict[str, Any] = {
    "learning_rate": 0.1,
    "num_leaves": 15,
    "min_data_in_leaf": 200,
    "feature_fraction": 0.5,
    "bagging_fraction": 0.7,
    "bagging_freq": 1,
    "lambda_l2": 1.0,
    "max_bin": 63,
    "num_threads": 1,  # OpenMP threads spin on a shared machine: 1 is ~10x faster there
}
NUM_BOOST_ROUND = 200
EARLY_STOPPING_ROUNDS = 20
MAX_TRAIN_ROWS = 60_000  # windows overlap heavily; an even stride keeps fits fast
_CHUNK = 4096


def tabular_features(
    static: np.ndarray, observed: np.ndarray, known: np.ndarray, horizon: int,
    window_mean: bool = False,
) -> np.ndarray:
    """[B, S], [B, T, F], [B, T+H, K] window arrays -> [B, F (+ F) + 2K + S] float32 rows."""
    observed = np.asarray(observed, np.float32)
    known = np.asarray(known, np.float32)
    t = observed.shape[1]
    cols = [observed[:, -1]]
    if window_mean:
        cols.append(observed.mean(axis=1, dtype=np.float32))
    cols += [known[:, t - 1], known[:, t - 1 + horizon], np.asarray(static, np.float32)]
    return np.concatenate(cols, axis=1)


def feature_names(data: TrainingData, window_mean: bool = False) -> list[str]:
    obs, known, static = data.observed_names, data.known_names, data.static_names
    return (
        [f"{n}@last" for n in obs]
        + ([f"{n}@mean{data.lookback}" for n in obs] if window_mean else [])
        + [f"{n}@t" for n in known]
        + [f"{n}@t+{data.horizon}" for n in known]
        + list(static)
    )


def _split_features(split: SplitArrays, lookback: int, horizon: int, window_mean: bool,
                    windows: np.ndarray | None = None) -> np.ndarray:
    """Tabular rows of the split's windows (all, or the given window indices), in order."""
    starts = np.asarray(split.window_starts, np.int64)
    if windows is not None:
        starts = starts[windows]
    parts = []
    for c in range(0, starts.size, _CHUNK):
        s = starts[c : c + _CHUNK]
        hist = s[:, None] + np.arange(lookback)[None, :]
        fut = s[:, None] + np.arange(lookback + horizon)[None, :]
        last = s + lookback - 1
        parts.append(tabular_features(np.asarray(split.static)[last],
                                      take_rows(split.observed, hist),
                                      np.asarray(split.known)[fut], horizon, window_mean))
    if not parts:
        return np.zeros((0, 0), np.float32)
    return np.concatenate(parts, axis=0)


def _targets(split: SplitArrays, lookback: int, scale: float,
             windows: np.ndarray | None = None) -> np.ndarray:
    starts = np.asarray(split.window_starts, np.int64)
    if windows is not None:
        starts = starts[windows]
    return np.asarray(split.targets, np.float64)[starts + lookback - 1] / scale


@dataclass
class LightGBMQuantiles:
    """Fitted boosters, ``boosters[h][j]`` for horizon h + 1 and ``quantiles[j]``."""

    boosters: list[list[lgb.Booster]]
    quantiles: list[float]  # the dataset's: the output's last axis
    fitted_quantiles: list[float]  # those with a booster; the rest are interpolated
    lookback: int
    horizon: int
    feature_names: list[str]
    window_mean: bool = False
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def best_iterations(self) -> list[list[int]]:
        return [[int(b.best_iteration or b.current_iteration()) for b in row]
                for row in self.boosters]

    def _predict_rows(self, x: np.ndarray) -> np.ndarray:
        fitted = np.empty((x.shape[0], self.horizon, len(self.fitted_quantiles)), np.float64)
        for h, row in enumerate(self.boosters):
            for j, booster in enumerate(row):
                if x.shape[0]:
                    fitted[:, h, j] = booster.predict(
                        x, num_iteration=booster.best_iteration or None)
        fitted = np.sort(fitted, axis=2)  # quantiles never cross
        if self.fitted_quantiles == self.quantiles:
            return fitted.astype(np.float32)
        # linear in the quantile level between fitted ones, flat beyond them: still monotone
        fq, out = np.asarray(self.fitted_quantiles), np.empty(
            (x.shape[0], self.horizon, len(self.quantiles)), np.float32)
        hi = np.clip(np.searchsorted(fq, self.quantiles), 1, len(fq) - 1)
        for j, q in enumerate(self.quantiles):
            if len(fq) == 1:
                out[:, :, j] = fitted[:, :, 0]
                continue
            a, b = hi[j] - 1, hi[j]
            w = float(np.clip((q - fq[a]) / (fq[b] - fq[a]), 0.0, 1.0))
            out[:, :, j] = (1 - w) * fitted[:, :, a] + w * fitted[:, :, b]
        return out

    def predict(self, split: SplitArrays) -> np.ndarray:
        """[N windows, H, Q] target-scaled quantiles, in ``split.window_starts`` order."""
        return self._predict_rows(
            _split_features(split, self.lookback, self.horizon, self.window_mean))

    def __call__(self, static: Any, observed: Any, known: Any) -> np.ndarray:
        """The forecaster interface of ``predict_windows``: batches of windows (tensors or
        arrays) -> [B, H, Q]."""
        arrays = [np.asarray(a.cpu().numpy() if hasattr(a, "cpu") else a, np.float32)
                  for a in (static, observed, known)]
        return self._predict_rows(tabular_features(*arrays, self.horizon, self.window_mean))


def _stride(n: int, cap: int | None) -> np.ndarray | None:
    if cap is None or n <= cap:
        return None
    return np.linspace(0, n - 1, cap).round().astype(np.int64)


def _datasets(data: TrainingData, window_mean: bool, max_train_rows: int | None, max_bin: int
              ) -> tuple[lgb.Dataset, lgb.Dataset, np.ndarray, np.ndarray, list[str]]:
    """(train, validation) LightGBM datasets on the window features, labelled with horizon 1,
    their ``[W, H]`` scaled targets (the train windows strided to ``max_train_rows``) and
    the feature names."""
    t, h, scale = data.lookback, data.horizon, data.target_scale
    train, valid = data.splits["train"], data.splits["validation"]
    pick = _stride(train.n_windows, max_train_rows)
    x_train = _split_features(train, t, h, window_mean, pick)
    x_valid = _split_features(valid, t, h, window_mean)
    names = feature_names(data, window_mean)
    if x_train.shape[1] != len(names):
        raise ValueError(f"lightgbm baseline: {x_train.shape[1]} feature columns, "
                         f"{len(names)} names in meta")
    y_train, y_valid = _targets(train, t, scale, pick), _targets(valid, t, scale)
    dtrain = lgb.Dataset(x_train, label=y_train[:, 0], feature_name=names, free_raw_data=False,
                         params={"max_bin": max_bin, "verbose": -1})
    dvalid = lgb.Dataset(x_valid, label=y_valid[:, 0], reference=dtrain, free_raw_data=False)
    return dtrain, dvalid, y_train, y_valid, names


@dataclass(frozen=True)
class LightGBMConfig:
    """What ``lightgbm_model`` and each walk-forward fold fit: ``fit_lightgbm_quantiles``'s
    arguments (``params`` override :data:`DEFAULT_PARAMS`)."""

    seed: int = 0
    fit_quantiles: tuple[float, ...] | None = None  # None: every quantile of the dataset
    num_boost_round: int = NUM_BOOST_ROUND
    early_stopping_rounds: int = EARLY_STOPPING_ROUNDS
    max_train_rows: int | None = MAX_TRAIN_ROWS
    window_mean: bool = False
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.fit_quantiles is not None:
            object.__setattr__(self, "fit_quantiles", tuple(float(q) for q in self.fit_quantiles))
        if self.num_boost_round < 1:
            raise ValueError(f"num_boost_round must be >= 1, got {self.num_boost_round}")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["fit_quantiles"] = None if self.fit_quantiles is None else list(self.fit_quantiles)
        return out

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> LightGBMConfig:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in values.items() if k in known})


def fit(data: TrainingData, config: LightGBMConfig) -> LightGBMQuantiles:
    """``fit_lightgbm_quantiles`` with a ``LightGBMConfig``."""
    return fit_lightgbm_quantiles(
        data, seed=config.seed, fit_quantiles=config.fit_quantiles,
        num_boost_round=config.num_boost_round,
        early_stopping_rounds=config.early_stopping_rounds,
        max_train_rows=config.max_train_rows, window_mean=config.window_mean, **config.params)


def fit_lightgbm_quantiles(
    data: TrainingData,
    *,
    seed: int = 0,
    fit_quantiles: Sequence[float] | None = None,
    num_boost_round: int = NUM_BOOST_ROUND,
    early_stopping_rounds: int = EARLY_STOPPING_ROUNDS,
    max_train_rows: int | None = MAX_TRAIN_ROWS,
    window_mean: bool = False,
    **params: Any,
) -> LightGBMQuantiles:
    """Fit one quantile booster per horizon and per quantile of the dataset. On small
    profiles ``fit_quantiles=(0.1, 0.5, 0.9)`` fits only those (3 x H boosters instead of
    Q x H) and interpolates the dataset's other quantiles; the output keeps the dataset's.
    ``params`` override :data:`DEFAULT_PARAMS` (e.g. ``num_leaves=7``);
    ``max_train_rows`` strides the train windows evenly; ``window_mean=True`` adds each
    observed feature's mean over the lookback (twice the columns; on the 20-day ES/ZN demo
    data it took 3x as long for no better test IC, as the library already has windows)."""
    out_qs = [float(q) for q in data.meta["quantiles"]]
    qs = out_qs if fit_quantiles is None else [float(q) for q in fit_quantiles]
    if not qs or sorted(set(qs)) != qs or not all(0.0 < q < 1.0 for q in qs):
        raise ValueError(f"fit_quantiles must be increasing and in (0, 1), got {qs}")
    for name in ("train", "validation"):
        if name not in data.splits or data.splits[name].n_windows == 0:
            raise ValueError(f"lightgbm baseline: the dataset has no {name} windows")
    t, h = data.lookback, data.horizon
    base = {**DEFAULT_PARAMS, **params, "objective": "quantile", "metric": "quantile",
            "seed": int(seed), "deterministic": True, "force_col_wise": True, "verbose": -1}
    dtrain, dvalid, y_train, y_valid, names = _datasets(data, window_mean, max_train_rows,
                                                        base["max_bin"])
    boosters: list[list[lgb.Booster]] = []
    for k in range(h):
        dtrain.set_label(y_train[:, k])
        dvalid.set_label(y_valid[:, k])
        boosters.append([
            lgb.train({**base, "alpha": q}, dtrain, num_boost_round=num_boost_round,
                      valid_sets=[dvalid], valid_names=["validation"],
                      callbacks=[lgb.early_stopping(early_stopping_rounds, verbose=False)])
            for q in qs])
    return LightGBMQuantiles(boosters=boosters, quantiles=out_qs, fitted_quantiles=qs,
                             lookback=t, horizon=h, window_mean=window_mean,
                             feature_names=names, params={**base, "num_boost_round":
                                                          num_boost_round})
