"""The evaluation assets' Dagster Config and the library's walk-forward protocol it makes
(the leaderboard and the forecasting assets read it too)."""

import dagster as dg

from assets.common.config_fields import delegated, sized
from models.evaluation.walk_forward import WalkForwardConfig


class EvaluationConfig(dg.Config):
    cost_multiplier: float = 1.0
    threshold_k: float = 1.0
    latency_calls: int = sized("evaluation", "latency_calls", 200, "Timed calls per model.")
    bootstrap: int = sized("evaluation", "bootstrap", 1000, "Bootstrap resamples per interval.")
    seed: int = 0
    folds: int = sized("walk_forward", "folds", 4, "Walk-forward folds (rolling origins).")
    test_days: int = sized("walk_forward", "test_days", 5, "Trade dates per test fold.")
    window: str = "expanding"  # or "sliding" (then train_days trade dates of train)
    train_days: int = 0
    validation_days: int = sized("walk_forward", "validation_days", 2,
                                 "Trade dates before the embargo kept for early stopping.")
    test_fraction: float = delegated(WalkForwardConfig, "test_fraction", "Share of the trade "
                                     "dates tested when more than folds x test_days (the "
                                     "evidence grows with the history, the retrainings do "
                                     "not).", section="walk_forward")
    max_test_days: int = delegated(WalkForwardConfig, "max_test_days", "Cap on all folds' "
                                   "test dates together.", section="walk_forward")
    report_rows: int = sized("evaluation", "report_rows", 0, "Most recent test-split rows "
                             "(all roots) the production model's own report scores (plots, "
                             "running cost, model card); the skill claim is the walk-forward. "
                             "0: the whole split.")


def walk_forward_config(config: EvaluationConfig) -> WalkForwardConfig:
    """The library's walk-forward protocol for the asset's Config."""
    return WalkForwardConfig(folds=config.folds, test_days=config.test_days,
                             window=config.window, train_days=config.train_days or None,
                             validation_days=config.validation_days,
                             test_fraction=config.test_fraction,
                             max_test_days=config.max_test_days)
