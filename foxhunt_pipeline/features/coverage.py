"""What a dataset's splits and a walk-forward's folds cover, said where it matters: a root
that is never scored, and a split or fold that spans a hole in the data (a validation in
2013 and a test in 2020 compare nothing a model could have learnt in between)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

import numpy as np

from foxhunt_pipeline.features.grid import trade_dates
from foxhunt_pipeline.instruments.sessions import missing_between
from models.windows import SPLITS, TrainingData

#: a split or fold spanning more missing sessions than this (a week of data) is reported
MAX_MISSING_SESSIONS = 5


def holes(roots: Sequence[str], dates: Sequence[str | date], more_than: int = MAX_MISSING_SESSIONS
          ) -> list[tuple[str, str, int]]:
    """(last date before, first date after, missing sessions) between consecutive ``dates``
    where every root's calendar misses more than ``more_than`` sessions."""
    days = np.unique(np.asarray([str(d) for d in dates], dtype="datetime64[D]"))
    if days.size < 2 or not roots:
        return []
    missing = np.min([missing_between(r, days[:-1], days[1:]) for r in roots], axis=0)
    return [(str(days[i]), str(days[i + 1]), int(missing[i])) for i in np.flatnonzero(missing > more_than)]


def _describe(found: list[tuple[str, str, int]]) -> str:
    shown = ", ".join(f"{a} .. {b} ({n} missing sessions)" for a, b, n in found[:3])
    return shown + (f" and {len(found) - 3} more" if len(found) > 3 else "")


def dataset_warnings(data: TrainingData, more_than: int = MAX_MISSING_SESSIONS) -> list[str]:
    """Roots without validation or test bars, and splits (or the step from one split to the
    next) that span more than ``more_than`` missing sessions."""
    roots = list(data.meta["roots"])
    out: list[str] = []
    previous: tuple[str, str] | None = None
    for name in SPLITS:
        split = data.splits[name]
        meta = data.meta["splits"][name]
        span = f"{meta['first_date']} .. {meta['last_date']}"
        have = set(np.unique(np.asarray(split.root_index)).tolist())
        for i, root in enumerate(roots):
            if i not in have and name != "train":
                out.append(f"training_dataset: {root} has no {name} bars ({name} split {span}): "
                           f"it is {'trained on but never scored' if name == 'test' else 'not validated'}"
                           f"; land more of {root}'s recent sessions")
        days = np.unique(trade_dates(np.asarray(split.ts_event)))
        found = holes(roots, days, more_than)
        if found:
            out.append(f"training_dataset: the {name} split {span} spans holes in the data: {_describe(found)}")
        if previous is not None and days.size:
            step = holes(roots, [previous[1], days[0]], more_than)
            if step:
                out.append(f"training_dataset: {previous[0]} ends and {name} starts across a hole in the "
                           f"data: {_describe(step)}")
        if days.size:
            previous = (name, str(days[-1]))
    return out


def fold_warnings(folds: Sequence, roots: Sequence[str], more_than: int = MAX_MISSING_SESSIONS
                  ) -> list[str]:
    """Walk-forward folds (``models.evaluation.walk_forward.Fold``) whose train, validation
    and test dates span more than ``more_than`` missing sessions."""
    out = []
    for fold in folds:
        parts = {"train": fold.train_dates, "validation": fold.validation_dates, "test": fold.test_dates}
        found = holes(roots, [d for ds in parts.values() for d in ds], more_than)
        if found:
            d = fold.describe()
            out.append(f"walk-forward fold {fold.number} (train {d['train']}, validation {d['validation']}, "
                       f"test {d['test']}) spans holes in the data: {_describe(found)}")
    return out


__all__ = ["MAX_MISSING_SESSIONS", "dataset_warnings", "fold_warnings", "holes"]
