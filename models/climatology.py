"""The climatology forecast: unconditional training-split quantiles per horizon.

It is the baseline every forecaster must beat, used by training (as the loss to beat) and
by evaluation (as a row of the leaderboard), so it lives below both.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from models.windows import TrainingData


def climatology_quantiles(
    data: TrainingData, quantiles: Sequence[float] | None = None, scaled: bool = True
) -> np.ndarray:
    """Unconditional training-split quantiles per horizon, ``[H, Q]``, from the targets of
    the training windows' decision rows (target-scaled unless ``scaled=False``)."""
    if "train" not in data.splits:
        raise ValueError("climatology needs the train split, which this dataset lacks")
    qs = list(quantiles if quantiles is not None else data.meta["quantiles"])
    tr = data.splits["train"]
    rows = np.asarray(tr.window_starts, np.int64) + data.lookback - 1
    y = np.asarray(tr.targets, np.float64)[rows]
    if y.shape[0] == 0:
        raise ValueError("climatology needs training windows; the train split has none")
    q = np.nanquantile(y, qs, axis=0).T  # [H, Q]
    return q / data.target_scale if scaled else q
