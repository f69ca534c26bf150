"""No skill where none exists (issues 13, 23): on the random walk generated from the same
seed and settings as ``test_walk_forward_skill``'s drift, no candidate, family or baseline,
reaches a pooled Sharpe or IC CI lower bound above 0, and the leaderboard's rule promotes
none (issue 37). Sizes and why: ``ci_skill``."""

from __future__ import annotations

import pytest

from models.evaluation.new_home import decide_new_home
from models.evaluation.walk_forward import WalkForwardResult
from tests.synthetic import ci_skill

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> WalkForwardResult:
    return ci_skill.run(tmp_path_factory.mktemp("walk"), random_walk=True)


def test_nothing_shows_skill_on_a_random_walk(walk) -> None:
    assert len(walk.folds) == 3 and len(walk.candidates) == 10
    for name, (sharpe_low, ic_low, _) in ci_skill.skill(walk).items():
        assert not sharpe_low > 0, (name, ci_skill.skill(walk))
        assert not ic_low > 0, (name, ci_skill.skill(walk))


def test_the_leaderboard_rule_promotes_nothing_on_a_random_walk(walk) -> None:
    home = decide_new_home(walk, resamples=300)
    promoted = {scope: d.reason for scope, d in home.decisions.items() if d.promote}
    assert not promoted, promoted
