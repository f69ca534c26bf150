"""What the agents observe: the newest forecasts of the trained forecasters, a few recent
features and the root's cost, one compact row per bar.

Why not the raw window: a 60 x 261 window flattened to ~15,700 inputs cannot be learnt from
the few thousand noisy rewards a trading episode gives (DQN traded on nearly every bar, PPO
never). The forecasters already condense the window into what matters for a position, the
distribution of the coming returns; the agent's job is to turn that, the cost of changing
position and its current position into a decision. So its state at bar ``t`` is

* every forecaster's quantiles for every horizon (target-scaled log returns, as the models
  output them), from the window ending at ``t``;
* a few observed features of row ``t`` (normalised as in the dataset): recent returns and
  volatility;
* the root's one-way cost in the same target-scaled units, so one policy serves roots with
  different ticks.

The environment appends the position one-hot. A row has a state only where every forecaster
has its full window (``lookback`` history rows and ``horizon`` known rows in one segment, all
finite), the rule its training windows follow; elsewhere the state is NaN and the bar is not
traded. In walk-forward each fold's agent observes that fold's own forecasters, trained on the
fold's train split: nothing that saw the test period.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from foxhunt_pipeline.basics.atomic import atomic_write
from foxhunt_pipeline.basics.config_fields import check_known_fields
from models.agents import forecast_memo
from models.registry import model_type_of
from models.training.checkpoint import load_checkpoint, read_checkpoint_meta, save_checkpoint
from models.windows import SplitArrays, TrainingData

#: recent returns and volatility (normalised): what a trader reads beside a forecast
DEFAULT_STATE_FEATURES = ("f_ret_1b", "f_ret_5b", "f_ret_15b", "f_ret_std_20", "f_ret_std_60")
#: rows per forward pass of a forecaster over a split: the agents' state and the forecasters'
#: walk-forward both use it, so the forecast cache serves one to the other (torch's CPU
#: kernels are not batch-invariant: another batch size gives other last bits, another key)
FORECAST_BATCH = 1024
LAYOUT_FILE = "state.json"
FORECASTERS_DIR = "forecasters"


@dataclass(frozen=True)
class StateLayout:
    """The columns of the state, in order; JSON round-trip for the exported policy."""

    forecasters: tuple[str, ...]
    lookback: int
    horizon: int
    quantiles: tuple[float, ...]
    feature_names: tuple[str, ...]
    observed_names: tuple[str, ...]  # the dataset's, to find the features by position
    cost: bool = True

    def names(self) -> list[str]:
        out = [f"{f}_h{h + 1}_q{round(q * 100):02d}" for f in self.forecasters
               for h in range(self.horizon) for q in self.quantiles]
        return out + [f"feature:{n}" for n in self.feature_names] + (["cost"] if self.cost else [])

    @property
    def width(self) -> int:
        return len(self.names())

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StateLayout:
        check_known_fields(cls, d)
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


class ForecastState:
    """Forecasters plus a layout: ``compute(data, split)`` gives the state of every row.

    Results are kept per split object (the validation backtests of one training ask for
    the same split many times), so the forecasters run once per split."""

    def __init__(self, forecasters: Mapping[str, nn.Module], layout: StateLayout,
                 train_configs: Mapping[str, Mapping[str, Any]] | None = None):
        if tuple(forecasters) != layout.forecasters:
            raise ValueError(f"forecasters {list(forecasters)} do not match the layout's "
                             f"{list(layout.forecasters)}")
        if not forecasters:
            raise ValueError("the forecast state needs at least one forecaster")
        self.forecasters = {k: m.eval() for k, m in forecasters.items()}
        self.layout = layout
        # how each forecaster was trained (TrainConfig.to_dict()): walk-forward retrains them
        self.train_configs = {k: dict(v) for k, v in (train_configs or {}).items()}
        self._cache: list[tuple[SplitArrays, np.ndarray]] = []

    @classmethod
    def for_data(cls, forecasters: Mapping[str, nn.Module], data: TrainingData,
                 features: Sequence[str] = DEFAULT_STATE_FEATURES,
                 train_configs: Mapping[str, Mapping[str, Any]] | None = None) -> ForecastState:
        """The state of ``forecasters`` on ``data``'s layout; features the dataset lacks are
        left out (a custom feature set keeps working)."""
        names = data.observed_names
        for name, model in forecasters.items():
            config = getattr(model, "config", None)
            if config is None or int(config.n_observed) != len(names):
                raise ValueError(f"forecaster {name!r} was not trained on this dataset's "
                                 f"{len(names)} observed features")
        layout = StateLayout(
            forecasters=tuple(forecasters), lookback=data.lookback, horizon=data.horizon,
            quantiles=tuple(float(q) for q in data.meta["quantiles"]),
            feature_names=tuple(f for f in features if f in names),
            observed_names=tuple(names))
        return cls(forecasters, layout, train_configs)

    def names(self) -> list[str]:
        return self.layout.names()

    def compute(self, data: TrainingData, split: str, batch_size: int = FORECAST_BATCH) -> np.ndarray:
        """``[N, width]`` float32 for ``data.splits[split]``; NaN rows have no full window."""
        part = data.splits[split]
        for seen, state in self._cache:
            if seen is part:
                return state
        self._check(data)
        n = part.n_rows
        state = np.full((n, self.layout.width), np.nan, dtype=np.float32)
        width = self.layout.horizon * len(self.layout.quantiles)
        for k, model in enumerate(self.forecasters.values()):
            state[:, k * width:(k + 1) * width] = forecasts(model, part, self.layout.lookback,
                                                            self.layout.horizon,
                                                            batch_size).reshape(n, width)
        col = len(self.forecasters) * width
        idx = [self.layout.observed_names.index(f) for f in self.layout.feature_names]
        if idx:
            state[:, col:col + len(idx)] = part.observed[:, idx]
            col += len(idx)
        if self.layout.cost:
            state[:, col] = data.cost_log_return(split) / data.target_scale
        self._cache = [*self._cache[-5:], (part, state)]
        return state

    def of_windows(self, static: torch.Tensor, observed: torch.Tensor, known: torch.Tensor,
                   cost: torch.Tensor) -> torch.Tensor:
        """The state of a batch of forecaster windows (``cost`` per window, target-scaled):
        what one decision costs at inference, forecasters included."""
        b = observed.shape[0]
        parts = [m(static, observed, known).reshape(b, -1) for m in self.forecasters.values()]
        idx = [self.layout.observed_names.index(f) for f in self.layout.feature_names]
        parts.append(observed[:, -1, idx])
        if self.layout.cost:
            parts.append(cost.reshape(b, 1).to(observed.dtype))
        return torch.cat(parts, dim=1)

    def _check(self, data: TrainingData) -> None:
        if tuple(data.observed_names) != self.layout.observed_names:
            raise ValueError("the dataset's observed features differ from those the agent's "
                             "forecasters were trained on")
        if (data.lookback, data.horizon) != (self.layout.lookback, self.layout.horizon):
            raise ValueError(f"dataset windows {data.lookback}+{data.horizon} differ from the "
                             f"agent's {self.layout.lookback}+{self.layout.horizon}")

    # --- persistence -------------------------------------------------------------------
    def save(self, directory: str | os.PathLike[str]) -> Path:
        """``state.json`` and one forecaster checkpoint per name under ``forecasters/``
        (safetensors + JSON: no pickle)."""
        directory = Path(directory)
        for name, model in self.forecasters.items():
            extra = {"train_config": self.train_configs[name]} if name in self.train_configs else {}
            save_checkpoint(directory / FORECASTERS_DIR / name, model,
                            model_type=model_type_of(model), config=model.config.to_dict(),
                            extra=extra)
        path = directory / LAYOUT_FILE
        atomic_write(path, lambda p: p.write_text(json.dumps(self.layout.to_dict(), indent=2)))
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike[str], device: str | torch.device = "cpu"
             ) -> ForecastState:
        directory = Path(directory)
        layout = StateLayout.from_dict(json.loads((directory / LAYOUT_FILE).read_text()))
        loaded = {name: load_checkpoint(directory / FORECASTERS_DIR / name, device=device)
                  for name in layout.forecasters}
        return cls({n: m for n, (m, _) in loaded.items()}, layout,
                   {n: meta["train_config"] for n, (_, meta) in loaded.items()
                    if "train_config" in meta})

    @staticmethod
    def exists(directory: str | os.PathLike[str]) -> bool:
        return (Path(directory) / LAYOUT_FILE).is_file()


def saved_forecasters(directory: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """``name -> {model_type, config, train_config}`` of the forecasters saved beside a policy
    (no weights read): what a walk-forward needs to train the same forecasters per fold."""
    directory = Path(directory)
    if not ForecastState.exists(directory):
        return {}
    layout = StateLayout.from_dict(json.loads((directory / LAYOUT_FILE).read_text()))
    out = {}
    for name in layout.forecasters:
        meta = read_checkpoint_meta(directory / FORECASTERS_DIR / name)
        out[name] = {"model_type": meta["model_type"], "config": meta["config"],
                     "train_config": meta.get("train_config")}
    return out


@torch.no_grad()
def forecasts(model: nn.Module, part: SplitArrays, lookback: int, horizon: int,
              batch_size: int = FORECAST_BATCH) -> np.ndarray:
    """``[N, H, Q]`` quantiles of ``model`` for the window ending at each row; NaN where the
    row has no full window in its segment or an input is not finite. The same weights on
    the same rows are computed once per process (``models.agents.forecast_memo``)."""
    return forecast_memo.memoized(
        forecast_memo.forecast_key(model, part, lookback, horizon, batch_size),
        lambda: _forecasts(model, part, lookback, horizon, batch_size))


def _forecasts(model: nn.Module, part: SplitArrays, lookback: int, horizon: int,
               batch_size: int) -> np.ndarray:
    n = part.n_rows
    n_q = len(model.config.quantiles)
    out = np.full((n, horizon, n_q), np.nan, dtype=np.float32)
    span = lookback + horizon
    if n < span:
        return out
    segment = np.asarray(part.segment)
    starts = np.arange(n - span + 1)
    starts = starts[segment[starts] == segment[starts + span - 1]]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    for lo in range(0, starts.size, batch_size):
        s = starts[lo:lo + batch_size]
        hist = s[:, None] + np.arange(lookback)
        fut = s[:, None] + np.arange(span)
        last = s + lookback - 1
        static = np.asarray(part.static[last], dtype=np.float32)
        observed = np.asarray(part.observed[hist], dtype=np.float32)
        known = np.asarray(part.known[fut], dtype=np.float32)
        ok = (np.isfinite(static).all(1) & np.isfinite(observed).all((1, 2))
              & np.isfinite(known).all((1, 2)))
        if not ok.any():
            continue
        pred = model(*(torch.from_numpy(x[ok]).to(device) for x in (static, observed, known)))
        out[last[ok]] = pred.float().cpu().numpy()
    model.train(was_training)
    return out
