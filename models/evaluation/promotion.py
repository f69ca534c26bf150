"""Who is champion: a pure decision from the pooled rows of one walk-forward protocol and
the paired comparison of their test bars (``models.evaluation.paired``).

The rule, per scope (each family, and ``overall`` over all of them):

1. A candidate *qualifies* when it traded, is not a baseline in disguise (``equals``), beats
   every naive baseline in the paired Sharpe test (the CI of Sharpe(candidate) -
   Sharpe(baseline) lies above 0, at the family-wise level of the whole table) and is in the
   Model Confidence Set.
2. The challenger is the qualifying candidate with the best point Sharpe (the tie rule: all
   qualifiers are statistically indistinguishable from the best model, so the point
   estimate picks; equal Sharpe goes to the newer version, then the name).
3. With no champion, the challenger is promoted. A champion that still qualifies stays
   unless the challenger beats it in the paired test (no churn on noise); a champion that
   no longer qualifies (it lost to a baseline or fell out of the MCS) is replaced by the
   challenger.

Rows are identified in the comparison by ``candidate_key``; baselines by their names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from models.evaluation.paired import PairedComparison

OVERALL = "overall"


@dataclass(frozen=True)
class Decision:
    promote: bool
    winner: dict[str, Any] | None  # the challenger (promoted or not); None when none qualifies
    reason: str
    scope: str = OVERALL
    test: str = ""  # which test decided: baselines, mcs, champion, no champion, ...


def candidate_key(row: Mapping[str, Any]) -> str:
    """A model version's name in the paired comparison (``foxhunt-tft v3``); a baseline's is
    its model name."""
    v = row.get("version")
    return f"{row.get('model', '?')}" + (f" v{v}" if v not in (None, "") else "")


def _value(row: Mapping[str, Any], key: str) -> float:
    try:
        v = float(row.get(key, math.nan))
    except (TypeError, ValueError):
        return math.nan
    return v if math.isfinite(v) else math.nan


def _no_trades(row: Mapping[str, Any]) -> bool:
    n = _value(row, "n_trades")
    return "n_trades" in row and (math.isnan(n) or n <= 0)


def _version_number(row: Mapping[str, Any]) -> float:
    try:
        return float(row.get("version"))
    except (TypeError, ValueError):
        return -math.inf


def disqualified(row: Mapping[str, Any], comparison: PairedComparison,
                 baselines: Sequence[str]) -> tuple[str, str] | None:
    """``(test, why)`` when ``row`` cannot be champion, ``None`` when it qualifies."""
    key = candidate_key(row)
    if row.get("equals"):
        return "equals", f"{key} equals {row['equals']} on every test bar"
    if _no_trades(row):
        return "trades", f"{key} made no trade"
    if key not in comparison.names:
        return "bars", f"{key} has no test bars on this protocol"
    if not baselines:
        return "baselines", "no naive baseline was scored on this protocol"
    for b in baselines:
        d = comparison.diff(key, b)
        if not d.significant:
            return "baselines", (f"{key} does not beat {b}: Sharpe difference {d.describe()} "
                                 f"at {d.level:.4g}")
    if not comparison.in_mcs(key):
        p = comparison.mcs_pvalues.get(key, math.nan)
        return "mcs", f"{key} is not in the Model Confidence Set (p = {p:.3g})"
    return None


def decide(rows: Sequence[Mapping[str, Any]], comparison: PairedComparison,
           baselines: Sequence[str], champion: Mapping[str, Any] | None,
           scope: str = OVERALL) -> Decision:
    """The promotion decision of one scope (rule in the module docstring)."""
    if not rows:
        return Decision(False, None, f"no model evaluated in {scope}", scope, "none")
    verdicts = {candidate_key(r): disqualified(r, comparison, baselines) for r in rows}
    qualified = [r for r in rows if verdicts[candidate_key(r)] is None]
    if not qualified:
        best = max(rows, key=lambda r: (comparison.sharpe.get(candidate_key(r), -math.inf),
                                        _version_number(r)))
        test, why = verdicts[candidate_key(best)] or ("", "")
        n = len(rows)
        return Decision(False, None, f"none of {n} candidate{'s' * (n != 1)} qualifies; the "
                        f"best by Sharpe: {why}", scope, test)
    best = dict(max(qualified, key=lambda r: (comparison.sharpe[candidate_key(r)],
                                              _version_number(r), candidate_key(r))))
    key = candidate_key(best)
    beats = (f"{key} (Sharpe {comparison.sharpe[key]:.3g}) beats all {len(baselines)} baselines "
             "and is in the MCS")
    if champion is None:
        return Decision(True, best, f"{beats}; no champion yet", scope, "no champion")
    champ = candidate_key(champion)
    if champ == key:
        return Decision(False, best, f"{key} is already the champion", scope, "champion")
    if champ not in comparison.names:
        return Decision(False, best, f"{beats}, but champion {champ} has no test bars on this "
                        "protocol", scope, "champion")
    d = comparison.diff(key, champ)
    if d.significant:
        return Decision(True, best, f"{beats} and beats champion {champ}: Sharpe difference "
                        f"{d.describe()}", scope, "champion")
    lapsed = disqualified(champion, comparison, baselines)
    if lapsed is not None:
        return Decision(True, best, f"{beats}; champion {champ} no longer qualifies: "
                        f"{lapsed[1]}", scope, lapsed[0])
    return Decision(False, best, f"{beats} but does not beat champion {champ}, which still "
                    f"qualifies: Sharpe difference {d.describe()}", scope, "champion")


def decide_scopes(rows: Sequence[Mapping[str, Any]], comparison: PairedComparison,
                  baselines: Sequence[str], champions: Mapping[str, Mapping[str, Any] | None],
                  refused: Mapping[str, str] | None = None) -> dict[str, Decision]:
    """One decision per ``family`` in ``rows``, then ``overall`` among each family's champion
    after its own decision (its promoted challenger, else its champion that holds, else its
    rows), so the overall champion is always its family's champion. ``champions`` maps a
    scope to its champion's row, ``refused`` a scope to why its champion cannot be compared."""
    refused = dict(refused or {})
    families = sorted({str(r["family"]) for r in rows if r.get("family") is not None})
    out: dict[str, Decision] = {}
    finalists: list[Mapping[str, Any]] = []
    for f in families:
        mine = [r for r in rows if r.get("family") == f]
        d = decide(mine, comparison, baselines, champions.get(f), f)
        if f in refused:
            d = Decision(False, d.winner, f"comparison refused: {refused[f]}", f, "refused")
        out[f] = d
        champ = champions.get(f)
        finalists += ([d.winner] if d.promote and d.winner is not None else
                      [champ] if champ is not None and f not in refused else mine)
    overall = decide(finalists, comparison, baselines, champions.get(OVERALL), OVERALL)
    if OVERALL in refused:
        overall = Decision(False, overall.winner, f"comparison refused: {refused[OVERALL]}",
                           OVERALL, "refused")
    return {**out, OVERALL: overall}


def verdict(decision: Decision, has_champion: bool) -> str:
    """``PROMOTED``, ``kept`` (a champion exists and stays) or ``no champion yet``."""
    if decision.promote:
        return "PROMOTED"
    return "kept" if has_champion else "no champion yet"


def n_paired_tests(n_candidates: int, n_baselines: int) -> int:
    """The tests one table makes: every candidate against every baseline and its champion."""
    return max(n_candidates, 1) * (max(n_baselines, 0) + 1)
