"""No skill where none exists (issues 13, 23): on the random walk generated from the same
seed and settings as ``test_walk_forward_skill``'s drift, no candidate, family or baseline,
reaches a pooled Sharpe or IC CI lower bound above 0. Sizes and why: ``ci_skill``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.synthetic import ci_skill

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


def test_nothing_shows_skill_on_a_random_walk(tmp_path: Path) -> None:
    walk = ci_skill.run(tmp_path, random_walk=True)
    assert len(walk.folds) == 3 and len(walk.candidates) == 10
    for name, (sharpe_low, ic_low, _) in ci_skill.skill(walk).items():
        assert not sharpe_low > 0, (name, ci_skill.skill(walk))
        assert not ic_low > 0, (name, ci_skill.skill(walk))
