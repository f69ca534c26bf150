"""Actions of a trading agent on a slice of the features table (no SB3, no training code).

The agent's observation at row ``t`` is what ``models.agents.trading_env`` built in training,
from the observed features normalised with the train-only stats the policy carries: the
forecasts of the forecasters saved beside it (``models.agents.state``: their quantiles on the
window ending at ``t``, a few features and the root's cost), or for a raw-window policy the
normalised features and known inputs of ``lookback`` rows of one (root, contract_seq)
segment; plus the one-hot of the current position. A forecasts agent decides only where its
forecasters have a full window (``horizon`` known rows after ``t`` in the segment), as in
training. Positions come from ``evaluate_positions``, the very
function evaluation scores agents with: each stretch starts flat and the policy's own
previous position feeds the next decision. A row gets an action when its window and the
next row are finite and the next bar is in the same segment without a session gap (the
environment's rule), so the newest bar of a segment has none.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch

from foxhunt_pipeline.serving.predict import (
    KEY_COLUMNS,
    PredictInputError,
    conform_keys,
    normalise_observed,
)
from models.agents.policy import load_policy
from models.agents.state import ForecastState
from models.agents.trading_env import LAYOUT_FIELDS, EnvConfig, evaluate_positions
from models.export import load_artifact
from models.windows import SplitArrays, TrainingData

SERVING_META_FILE = "serving.json"
# what an agent needs beyond its policy config to read the features table itself
SERVING_META_KEYS = ("observed_names", "known_names", "static_names", "normalization", "roots",
                     "feature_hash", "bar_seconds", "lookback", "horizon", "dataset_config",
                     "quantiles", "target_scale", "cost_log_return")


def serving_meta(training_meta: dict[str, Any]) -> dict[str, Any]:
    """The part of ``TrainingData.meta`` an agent artifact carries for serving."""
    return {k: training_meta[k] for k in SERVING_META_KEYS if k in training_meta}


class ExportedPolicy:
    """An exported agent artifact as a policy: ``act(obs)`` and the ``state`` it observes."""

    def __init__(self, fn: Callable[..., Any], state: ForecastState | None):
        self.fn, self.state = fn, state

    def act(self, obs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            x = torch.from_numpy(np.ascontiguousarray(obs, dtype=np.float32))
            return self.fn(x).float().argmax(dim=1).numpy()


def load_agent(path: str | os.PathLike[str]) -> tuple[Any, dict[str, Any]]:
    """``(policy, meta)`` from a policy directory (``policy.json`` + safetensors +
    ``serving.json``, and the forecasters it observes) or an exported agent artifact
    (``meta.json``, any precision). The policy has ``act(obs)`` and ``state``."""
    path = Path(path)
    if (path / "policy.json").exists():
        policy = load_policy(path)
        extra = path / SERVING_META_FILE
        if not extra.exists():
            raise PredictInputError(f"{path}: no {SERVING_META_FILE} (normalisation stats); retrain the agent")
        return policy, {**json.loads(extra.read_text()), "env": policy.meta.get("env", {}),
                        "observation": policy.meta.get("observation", "window")}
    fn, meta = load_artifact(path)
    if meta.get("kind") != "agent":
        raise PredictInputError(f"{path}: artifact is not an agent (kind {meta.get('kind')!r})")
    policy_meta = (meta.get("policy_config") or {}).get("meta", {})
    observation = policy_meta.get("observation", "window")
    if observation == "forecasts" and not ForecastState.exists(path):
        raise PredictInputError(f"{path}: the agent observes forecasts but its forecasters "
                                "(state.json, forecasters/) are missing")
    state = ForecastState.load(path) if observation == "forecasts" else None
    return ExportedPolicy(fn, state), {**meta, "env": policy_meta.get("env", {}),
                                       "observation": observation}


def is_agent(path: str | os.PathLike[str]) -> bool:
    path = Path(path)
    if (path / "policy.json").exists():
        return True
    meta = path / "meta.json"
    return meta.exists() and json.loads(meta.read_text()).get("kind") == "agent"


def actions_frame(
    act: Any, meta: dict[str, Any], df: pl.DataFrame, *, source: str = "input frame"
) -> pl.DataFrame:
    """ts_event, root, contract_seq, ``action`` (0 short, 1 flat, 2 long) and ``position``
    (-1 / 0 / 1) for every row of ``df`` the policy can decide on (see the module docstring)."""
    env = EnvConfig(**{k: v for k, v in (meta.get("env") or {}).items() if k in LAYOUT_FIELDS})
    env.cost_multiplier = 0.0
    forecasts = meta.get("observation") == "forecasts"
    lookback = int(meta["lookback"]) if forecasts else int(env.lookback or meta["lookback"])
    observed_names = list(meta["observed_names"])
    known_names = list(meta["known_names"]) if env.include_known or forecasts else []
    static_names = list(meta.get("static_names", [])) if forecasts else []
    missing = [c for c in (*KEY_COLUMNS, *observed_names, *known_names, *static_names)
               if c not in df.columns]
    if missing:
        raise PredictInputError(f"{source}: missing columns the agent needs: {missing[:20]}")
    df = conform_keys(df).sort("root", "ts_event")
    data = _serving_data(df, meta, observed_names, known_names, lookback)
    out = evaluate_positions(act, data, "serve", config=env, close_at_end=False)
    rows = np.asarray(out["rows"], dtype=np.int64)
    positions = np.asarray(out["positions"], dtype=np.int64)
    return df.select(KEY_COLUMNS)[rows].with_columns(
        pl.Series("action", positions + 1, dtype=pl.Int8),
        pl.Series("position", positions, dtype=pl.Int8),
    )


def _serving_data(df: pl.DataFrame, meta: dict[str, Any], observed_names: Sequence[str],
                  known_names: Sequence[str], lookback: int):
    """``df`` as a one-split ``TrainingData`` ("serve") with zero costs; a row whose window
    or next row is not finite gets a NaN return, which the environment leaves untraded."""
    n = df.height
    observed = normalise_observed(df, {**meta, "observed_names": list(observed_names)})
    known = df.select(pl.col(list(known_names)).cast(pl.Float32)).to_numpy().reshape(n, len(known_names))
    static_names = [c for c in meta.get("static_names", []) if c in df.columns]
    static = df.select(pl.col(static_names).cast(pl.Float32)).to_numpy().reshape(n, len(static_names))
    seg = df.select(
        (pl.col("root").ne(pl.col("root").shift()) | pl.col("contract_seq").ne(pl.col("contract_seq").shift()))
        .fill_null(True).cum_sum().cast(pl.Int32)
    ).to_series().to_numpy()
    bad = ~np.isfinite(np.concatenate([observed, known], axis=1)).all(axis=1)
    csum = np.concatenate([[0], np.cumsum(bad)])
    idx = np.arange(n)
    lo, hi = np.maximum(idx - lookback + 1, 0), np.minimum(idx + 2, n)
    ok = csum[hi] - csum[lo] == 0
    roots = sorted(set(df.get_column("root").to_list()))
    root_index = df.get_column("root").replace_strict(roots, list(range(len(roots)))).to_numpy().astype(np.int16)
    returns = np.where(ok, 0.0, np.nan).astype(np.float32)[:, None]
    split = SplitArrays(
        observed=observed, known=known, static=static, targets=returns,
        ts_event=df.get_column("ts_event").dt.epoch("ns").to_numpy(),
        segment=seg, root_index=root_index, window_starts=np.zeros(0, dtype=np.int64),
    )
    # the training costs and target scale: a forecasts state holds the root's cost in the
    # forecasters' units (the environment charges nothing here: cost_multiplier is 0)
    trained_cost = dict(zip(meta.get("roots", []), meta.get("cost_log_return", []), strict=False))
    data_meta = {"lookback": lookback, "horizon": int(meta.get("horizon", 1)),
                 "target_scale": float(meta.get("target_scale", 1.0)), "roots": roots,
                 "cost_log_return": [float(trained_cost.get(r, 0.0)) for r in roots],
                 "quantiles": list(meta.get("quantiles", [])),
                 "observed_names": list(observed_names), "known_names": list(known_names),
                 "static_names": static_names}
    return TrainingData(meta=data_meta, splits={"serve": split})


__all__ = ["SERVING_META_FILE", "actions_frame", "is_agent", "load_agent", "serving_meta"]
