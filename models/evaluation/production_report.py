"""The production model (trained on all data up to its test split) scored on its own test
split: the evaluation's plots, running cost and model-card table (the skill claim is the
walk-forward's)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from models import families
from models.agents.policy import load_policy
from models.agents.trading_env import evaluate_positions
from models.windows import recent_rows


class ReportSettings(Protocol):
    """What the report reads of the evaluation's settings (the evaluation asset's Config)."""

    report_rows: int
    cost_multiplier: float
    latency_calls: int
    bootstrap: int
    seed: int
    threshold_k: float


def production_report(family: str, pointer: dict, data, config: ReportSettings,
                       out_dir: Path, device: str):
    """The production model (trained on all data up to its test split) on its test split (its
    most recent ``report_rows``): plots and running cost."""
    data = recent_rows(data, {"test": config.report_rows or None})
    kwargs = dict(out_dir=out_dir, device=device, cost_multiplier=config.cost_multiplier,
                  latency_calls=config.latency_calls, bootstrap=config.bootstrap, seed=config.seed)
    if families.family(family).kind == "forecaster":
        return _evaluate_forecaster(family, pointer, data, config, kwargs)
    return _evaluate_agent(family, pointer, data, kwargs)


def _evaluate_forecaster(family: str, pointer: dict, data, config: ReportSettings, kwargs: dict):
    # lazy: models.evaluation.evaluate imports matplotlib (see walk_forward_chart)
    from models.evaluation.evaluate import evaluate_forecaster

    model, meta = families.family(family).load(pointer["checkpoint"], device=kwargs["device"])
    extra = meta.get("extra", meta)
    features = {k: extra.get(f"{k}_names", []) for k in ("observed", "known", "static")}
    return evaluate_forecaster(
        family, model, data, threshold_k=config.threshold_k, model_features=features,
        checkpoint_path=Path(pointer["checkpoint"]), **kwargs,
    )


def _evaluate_agent(family: str, pointer: dict, data, kwargs: dict):
    """The policy acts sequentially (its observation holds its own position), so positions come
    from the environment's batched replay; the evaluation then scores them like any model's."""
    # lazy: models.evaluation.evaluate imports matplotlib (see walk_forward_chart)
    from models.evaluation.evaluate import evaluate_agent

    policy = load_policy(pointer["checkpoint"], device=kwargs["device"])
    replay = evaluate_positions(policy, data, "test")
    positions = np.zeros(data.splits["test"].n_rows, dtype=np.float64)
    positions[np.asarray(replay["rows"], dtype=np.int64)] = replay["positions"]
    sample = torch.zeros(1, policy.obs_dim)

    def act(static, observed, known):
        """One decision from a window: the forecasters it observes, then the policy."""
        if policy.state is None:
            return policy(sample.expand(observed.shape[0], -1).to(kwargs["device"]))
        state = policy.state.of_windows(static, observed, known, torch.zeros(observed.shape[0]))
        position = torch.zeros(observed.shape[0], 3, device=state.device)
        position[:, 1] = 1.0
        return policy(torch.cat([state, position], dim=1))

    return evaluate_agent(family, positions, data, model=policy, act_fn=act,
                          checkpoint_path=Path(pointer["checkpoint"]) / "policy.safetensors", **kwargs)
