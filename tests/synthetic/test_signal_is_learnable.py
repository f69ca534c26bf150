"""Skill where skill exists, none where none does, on the real data path without Dagster:
generator -> DBN decode -> continuous series -> features -> training dataset -> LightGBM.
The median 5-bar forecast on the chronological test split has a clearly positive IC against
the realised 5-bar return on the default data, and none on ``random_walk`` data.

Kept fast (ES only, 10 days, the return and momentum feature groups, the median booster
only): the test is about the data having a learnable edge, not about the feature library."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from foxhunt_pipeline.features import build_features
from foxhunt_pipeline.features.dataset import DatasetConfig, build_training_dataset
from foxhunt_pipeline.features.library import FeatureConfig
from foxhunt_pipeline.synthetic import generate
from models.lightgbm.model import fit_lightgbm_quantiles
from tests.walk_forward_data import continuous_from

pytestmark = pytest.mark.slow
HORIZON = 5


def _test_ic(tmp_path: Path, random_walk: bool) -> tuple[float, int]:
    files = generate(tmp_path / "landing", days=10, roots=("ES",), seed=7,
                     random_walk=random_walk)
    continuous = continuous_from(files, tmp_path)
    features = build_features(continuous, FeatureConfig(groups=("returns", "momentum")))
    data = build_training_dataset(features, DatasetConfig(fractions=(0.5, 0.15, 0.35)),
                                  close_prices=continuous)
    model = fit_lightgbm_quantiles(data, seed=0, fit_quantiles=(0.5,), num_boost_round=60)
    test = data.splits["test"]
    median = model.predict(test)[:, HORIZON - 1, model.quantiles.index(0.5)]
    realised = test.targets[test.window_starts + data.lookback - 1, HORIZON - 1]
    if np.std(median) == 0:  # a constant forecast: nothing learned, no IC
        return 0.0, test.n_windows
    return float(np.corrcoef(median, realised)[0, 1]), test.n_windows


def test_lightgbm_finds_the_drift_and_nothing_in_a_random_walk(tmp_path: Path) -> None:
    ic, n = _test_ic(tmp_path / "default", random_walk=False)
    ic_walk, n_walk = _test_ic(tmp_path / "walk", random_walk=True)
    # overlapping 5-bar returns: about n / 5 independent pairs
    se, se_walk = np.sqrt(HORIZON / n), np.sqrt(HORIZON / n_walk)
    assert ic > 4 * se, (ic, se)
    assert ic_walk < 2 * se_walk, (ic_walk, se_walk)
