"""Skill where skill exists (issues 13, 23, "Done when"): on generated ES + ZN data with a
latent drift, LightGBM and every family retrained per fold reach a pooled Sharpe CI lower
bound above 0 after costs, and the forecasters a pooled IC CI lower bound above 0, at the
Bonferroni level for every candidate compared. Sizes and why: ``ci_skill``."""

from __future__ import annotations

import pytest

from models.evaluation.new_home import decide_new_home
from models.evaluation.skill import bonferroni_level
from models.evaluation.walk_forward import WalkForwardResult
from tests.synthetic import ci_skill

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]
TRADERS = ("foxhunt-lightgbm", "foxhunt-tft", "foxhunt-mamba2", "foxhunt-dqn", "foxhunt-ppo")
FORECASTERS = ("foxhunt-lightgbm", "foxhunt-tft", "foxhunt-mamba2", "foxhunt-ensemble")


@pytest.fixture(scope="module")
def drift(tmp_path_factory: pytest.TempPathFactory) -> WalkForwardResult:
    return ci_skill.run(tmp_path_factory.mktemp("drift"), random_walk=False)


def test_every_candidate_is_judged_on_three_folds_at_the_bonferroni_level(drift) -> None:
    level = bonferroni_level(len(drift.candidates))
    assert len(drift.folds) == 3 and len(drift.candidates) == 10
    assert all(c.pooled["ci_level"] == pytest.approx(level) for c in drift.candidates.values())


@pytest.mark.parametrize("name", TRADERS)
def test_trades_with_skill_after_costs(drift, name: str) -> None:
    pooled = drift.candidates[name].pooled
    assert pooled["sharpe_ci_low"] > 0, (name, ci_skill.skill(drift))
    assert pooled["n_trades"] > 0 and pooled["sharpe_ES"] > 0, (name, pooled)


@pytest.mark.parametrize("name", FORECASTERS)
def test_forecasts_with_skill(drift, name: str) -> None:
    assert drift.candidates[name].pooled["ic_ci_low"] > 0, (name, ci_skill.skill(drift))


def test_the_ensemble_trades_with_skill(drift) -> None:
    """Was a strict xfail (at CI sizes the ensemble's median stayed inside the cost band):
    with the TFT forecasting in units of recent volatility it trades with skill here too."""
    name = "foxhunt-ensemble"
    assert drift.candidates[name].pooled["sharpe_ci_low"] > 0, (name, ci_skill.skill(drift))


def test_the_leaderboard_rule_finds_a_champion(drift) -> None:
    """A new home on learnable data ends with an overall champion: the paired rule promotes
    what beats every naive baseline, not only what beats an interval."""
    home = decide_new_home(drift, resamples=300)
    assert home.champion is not None, home.decisions["overall"].reason
