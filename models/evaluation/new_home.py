"""The leaderboard's champion rule on a walk-forward result, as on a new home (no champion
yet): what ``benchmarks/walk_forward_skill.py`` prints and the CI skill tests assert."""

from __future__ import annotations

from dataclasses import dataclass

from models import families as registry
from models.evaluation.paired import (
    Bars,
    PairedComparison,
    aligned_pnl,
    compare,
    family_wise_level,
)
from models.evaluation.promotion import Decision, decide_scopes, n_paired_tests
from models.evaluation.skill import FAMILY_WISE_ALPHA
from models.evaluation.walk_forward import WalkForwardResult


@dataclass(frozen=True)
class NewHome:
    """The paired comparison of every candidate's pooled test bars and the decisions on it;
    ``keys`` maps a candidate's name to its key there (``"<name> v1"`` for a family)."""

    comparison: PairedComparison
    decisions: dict[str, Decision]
    keys: dict[str, str]
    families: list[dict]

    @property
    def champion(self) -> str | None:
        overall = self.decisions["overall"]
        return self.keys[overall.winner["model"]] if overall.promote else None


def decide_new_home(result: WalkForwardResult, alpha: float = FAMILY_WISE_ALPHA,
                    resamples: int = 1000, seed: int = 0) -> NewHome:
    """Families are the candidates whose name is not ``baseline:*``; the naive baselines
    are the bar every family must beat."""
    fams = {n: c for n, c in result.candidates.items() if not n.startswith("baseline:")}
    naive = [n for n in result.candidates if n.startswith("baseline:")]
    rows = [{"model": n, "version": "1", "family": registry.by_registered_name(n).name,
             "n_trades": c.pooled["n_trades"], "equals": c.equals} for n, c in fams.items()]
    keys = {n: (f"{n} v1" if n in fams else n) for n in result.candidates}
    pnl = aligned_pnl({keys[n]: Bars(c.bars.root, c.bars.ts, c.bars.pnl)
                       for n, c in result.candidates.items()})
    level = family_wise_level(n_paired_tests(len(rows), len(naive)), alpha)
    cmp = compare(pnl, float(result.protocol["bars_per_year"]), level=level,
                  resamples=resamples, seed=seed)
    return NewHome(cmp, decide_scopes(rows, cmp, naive, {}), keys, rows)
