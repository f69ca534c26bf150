"""The walk-forward's fold plan: which trade dates each fold trains, validates and tests on
(``models.evaluation.walk_forward`` has the protocol). Apart from the rows and the scoring,
so the row pool (``row_pool``) and the protocol read it without importing each other."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np


class WalkForwardError(ValueError):
    """The data cannot make the requested folds, or a fold failed: names the fold."""


@dataclass(frozen=True)
class WalkForwardConfig:
    folds: int = 3
    test_days: int = 2  # per fold, at least
    window: Literal["expanding", "sliding"] = "expanding"
    train_days: int | None = None  # sliding: trade dates of train (validation excluded)
    validation_days: int = 1
    embargo_bars: int | None = None  # None: lookback + horizon (the minimum allowed)
    #: share of the trade dates tested when that is more than folds x test_days (rounded
    #: down per fold, so a short history keeps the profile's test days); 0: never more.
    #: 0.35: 250 calendar days of CME data (~179 trade dates) test 62 dates in 2 folds (60 in 3)
    test_fraction: float = 0.35
    max_test_days: int = 252  # a trading year: the cap on all folds' test dates together

    def __post_init__(self) -> None:
        if self.folds < 1 or self.test_days < 1 or self.validation_days < 1:
            raise WalkForwardError(f"folds, test_days and validation_days must be >= 1: {self}")
        if not 0.0 <= self.test_fraction < 1.0 or self.max_test_days < 1:
            raise WalkForwardError("test_fraction must be in [0, 1) and max_test_days >= 1: "
                                   f"{self}")
        if self.window not in ("expanding", "sliding"):
            raise WalkForwardError(f"window must be 'expanding' or 'sliding', got {self.window!r}")
        if self.window == "sliding" and not (self.train_days or 0) >= 1:
            raise WalkForwardError("a sliding window needs train_days >= 1")

    def fold_test_days(self, n_dates: int) -> int:
        """Test dates per fold for a history of ``n_dates`` trade dates."""
        scaled = math.floor(self.test_fraction * n_dates / self.folds)
        cap = max(self.max_test_days // self.folds, self.test_days)
        return max(self.test_days, min(scaled, cap))

    def embargo(self, lookback: int, horizon: int) -> int:
        e = lookback + horizon if self.embargo_bars is None else int(self.embargo_bars)
        if e < lookback + horizon:
            raise WalkForwardError(f"embargo_bars={e} is below lookback + horizon = "
                                   f"{lookback + horizon}")
        return e


@dataclass(frozen=True)
class Fold:
    number: int  # 1-based, in time order
    train_dates: tuple[str, ...]
    validation_dates: tuple[str, ...]
    test_dates: tuple[str, ...]

    def describe(self) -> dict[str, str]:
        def span(ds: tuple[str, ...]) -> str:
            return f"{ds[0]} .. {ds[-1]}"
        return {"train": span(self.train_dates), "validation": span(self.validation_dates),
                "test": span(self.test_dates)}


def _date_units(dates: Sequence[Any]) -> list[tuple[str, ...]]:
    """Sorted trade dates as fold units; a partial first or last session (under half the
    median bars per date, e.g. where the data starts or stops) joins its neighbour."""
    ds, counts = np.unique(np.asarray([str(d) for d in dates]), return_counts=True)
    units = [(str(d),) for d in ds]
    if len(units) > 2:
        half = 0.5 * float(np.median(counts))
        if counts[-1] < half:
            units[-2:] = [units[-2] + units[-1]]
        if counts[0] < half:
            units[:2] = [units[0] + units[1]]
    return units


def plan_folds(dates: Sequence[Any], config: WalkForwardConfig) -> list[Fold]:
    """Folds over trade ``dates``: one per row (so partial sessions are seen) or unique
    (anything ``str`` renders as a date)."""
    units = _date_units(dates)
    test_days = config.fold_test_days(len(units))
    need_test = config.folds * test_days
    first_test = len(units) - need_test
    min_pre = config.validation_days + 1
    if first_test < min_pre:
        raise WalkForwardError(
            f"{config.folds} folds x {test_days} test days need at least "
            f"{need_test + min_pre} trade dates ({min_pre} before the first test period for "
            f"train and validation); the data has {len(units)}: "
            f"{units[0][0] if units else '-'} .. {units[-1][-1] if units else '-'}")

    def flat(us: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
        return tuple(d for u in us for d in u)

    folds = []
    for k in range(config.folds):
        start = first_test + k * test_days
        pre = units[:start]
        val = pre[-config.validation_days:]
        train = pre[: -config.validation_days]
        if config.window == "sliding":
            train = train[-int(config.train_days or 0):]
        folds.append(Fold(k + 1, flat(train), flat(val), flat(units[start : start + test_days])))
    return folds
