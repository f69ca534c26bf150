"""Finiteness of a built training dataset, per named column.

NaN or inf in a model input makes training fail ("loss is nan") only after minutes of
work, and a dataset replaced by such data takes the good one with it; so the dataset is
checked before it is stored, and the check names the columns.
"""

from __future__ import annotations

import numpy as np

from models.windows import TrainingData

CHUNK_ROWS = 1 << 20  # bounded scratch memory on large splits


def _bad_per_column(arr: np.ndarray, allow_nan: bool) -> np.ndarray:
    arr = arr.reshape(arr.shape[0], -1)
    counts = np.zeros(arr.shape[1], dtype=np.int64)
    for lo in range(0, arr.shape[0], CHUNK_ROWS):
        part = arr[lo : lo + CHUNK_ROWS]
        bad = np.isinf(part) if allow_nan else ~np.isfinite(part)
        counts += bad.sum(axis=0)
    return counts


def nonfinite_columns(data: TrainingData) -> dict[str, int]:
    """``{"<split>.<column>": count}`` of NaN / inf values in the model inputs (observed,
    known, static) and of inf in the targets (a null target, NaN, marks a contract's last
    bars and is kept out of windows by construction); empty when all are finite."""
    groups = (
        ("observed", data.observed_names, False),
        ("known", data.known_names, False),
        ("static", data.static_names, False),
        ("targets", list(data.meta.get("target_names", [])), True),
    )
    out: dict[str, int] = {}
    for split, arrays in data.splits.items():
        for attr, names, allow_nan in groups:
            counts = _bad_per_column(getattr(arrays, attr), allow_nan)
            for i in np.flatnonzero(counts):
                name = names[i] if i < len(names) else f"{attr}[{i}]"
                out[f"{split}.{name}"] = int(counts[i])
    return out


def describe(bad: dict[str, int], limit: int = 10) -> str:
    """One line for people: which columns hold how many non-finite values."""
    if not bad:
        return "all model inputs are finite"
    shown = ", ".join(f"{k} ({v})" for k, v in list(bad.items())[:limit])
    more = f" and {len(bad) - limit} more" if len(bad) > limit else ""
    return f"non-finite values (NaN / inf) in {len(bad)} columns: {shown}{more}"
