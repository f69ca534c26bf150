"""Folds and splits across a hole in the data are said (features.coverage): a validation in
2013 and a test in 2020 compare nothing a model could have learnt in between."""

from __future__ import annotations

from datetime import date

import pandas as pd

from foxhunt_pipeline.features.coverage import MAX_MISSING_SESSIONS, fold_warnings, holes
from models.evaluation.walk_forward import WalkForwardConfig, plan_folds


def _weekdays(first: str, last: str) -> list[str]:
    return [d.date().isoformat() for d in pd.bdate_range(first, last)]


def test_a_fold_across_years_without_data_is_named_and_a_plain_one_is_not():
    config = WalkForwardConfig(folds=2, test_days=2, validation_days=1)
    plain = plan_folds(_weekdays("2013-12-02", "2013-12-20"), config)
    assert fold_warnings(plain, ["ES", "GC"]) == []
    holed = plan_folds(_weekdays("2013-12-02", "2013-12-20") + _weekdays("2020-01-02", "2020-01-07"), config)
    said = fold_warnings(holed, ["ES", "GC"])
    assert said and all("2013-12-20 .. 2020-01-02" in w for w in said)
    assert said[0].startswith("walk-forward fold 1 ")


def test_a_short_outage_is_no_hole_worth_a_warning():
    days = [date(2024, 1, 2), date(2024, 1, 4), date(2024, 1, 19)]  # one session, then ten, missing
    assert holes(["ES"], days, more_than=MAX_MISSING_SESSIONS) == [("2024-01-04", "2024-01-19", 10)]
