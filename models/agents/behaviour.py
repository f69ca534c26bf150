"""How a trained agent behaves on a split: the share of short / flat / long decisions and
its mean position by hour of day (UTC), from the same replay evaluation scores it with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from models.agents.trading_env import POSITION_NAMES, evaluate_positions
from models.windows import TrainingData


@dataclass
class Behaviour:
    shares: dict[str, float]  # short / flat / long, summing to 1
    hourly_mean_position: dict[int, float]  # UTC hour -> mean position in [-1, 1]
    hourly_bars: dict[int, int]
    n_decisions: int
    split: str


def behaviour(policy: Any, data: TrainingData, split: str = "validation") -> Behaviour:
    replay = evaluate_positions(policy, data, split)
    pos = np.asarray(replay["positions"], dtype=np.int64)
    n = int(pos.size)
    shares = {name: float((pos == p).mean()) if n else float("nan")
              for name, p in zip(POSITION_NAMES, (-1, 0, 1), strict=True)}
    hours = (np.asarray(replay["ts"], dtype=np.int64) // 3_600_000_000_000) % 24
    hourly = {int(h): float(pos[hours == h].mean()) for h in np.unique(hours)}
    counts = {int(h): int((hours == h).sum()) for h in np.unique(hours)}
    return Behaviour(shares, hourly, counts, n, split)


__all__ = ["Behaviour", "behaviour"]
