"""The demo's history fits the demo profile's walk-forward (issue 37): on 12 generated days,
2 folds x 3 test dates trained the first fold on 2 trade dates and nothing was promoted."""

from pathlib import Path

from foxhunt_pipeline.config.profiles import DEMO_DAYS, PROFILES
from models.evaluation.folds import WalkForwardConfig, plan_folds
from tests.walk_forward_data import generated_pool


def test_the_demo_days_give_every_demo_fold_four_train_dates(tmp_path: Path):
    pool = generated_pool(tmp_path, days=DEMO_DAYS, roots=("ES",), groups=("returns",))
    sizes = PROFILES["demo"]["walk_forward"]
    folds = plan_folds(pool.dates, WalkForwardConfig(**sizes))
    assert len(folds) == sizes["folds"]
    assert all(len(f.test_dates) >= sizes["test_days"] for f in folds)
    assert min(len(f.train_dates) for f in folds) >= 4
    tested = sum(len(f.test_dates) for f in folds)
    assert tested >= 6  # 2 x 2 (4 dates, 10k bars) left CIs too wide to promote anything
