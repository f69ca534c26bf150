"""Champion / challenger decisions, pure: rows of metrics in, a decision with its reason out.

A row is a flat dict with ``model`` (name), optionally ``family`` (``tft``, ``dqn`` ...) and
``version`` (MLflow model version), and metric values. The challenger of a scope is its
best row by ``metric``; it is promoted only when it beats every baseline that reports the
metric *and* the current champion. Rows and baselines without a finite value of the metric
cannot win and cannot be beaten: a scope where no baseline reports it promotes nobody.
A row that says it made no trade (``n_trades`` 0 or null) cannot win on a trading metric,
and a row that ``equals`` a baseline (the same forecasts or positions on every test bar, or an
ensemble weighted all on one member) cannot win at all: it is that baseline or member, and
the table shows it as such.

Like for like: rows are compared only within one ``protocol_id`` (walk-forward folds,
dataset version, cost model; ``models.evaluation.walk_forward``). ``rows_on_protocol``
picks the protocol of the newest model evaluation and its pooled rows;
``champion_on_protocol`` finds the champion's row there or has it re-scored.

References (``oracle_row``: what the generator's oracle earned over the same test period)
are shown beside the rows and never compared: they are not candidates.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

OVERALL = "overall"

Baselines = Mapping[str, Mapping[str, Any]] | Sequence[Mapping[str, Any]] | None


@dataclass(frozen=True)
class Decision:
    promote: bool
    winner: dict[str, Any] | None  # the challenger (best row of the scope), promoted or not
    reason: str
    scope: str = OVERALL
    metric: str = ""


def _value(row: Mapping[str, Any] | None, key: str) -> float:
    if row is None:
        return math.nan
    try:
        v = float(row.get(key, math.nan))
    except (TypeError, ValueError):
        return math.nan
    return v if math.isfinite(v) else math.nan


def _label(row: Mapping[str, Any]) -> str:
    v = row.get("version")
    return f"{row.get('model', '?')}" + (f" v{v}" if v is not None else "")


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return a.get("model") == b.get("model") and a.get("version") == b.get("version")


#: Metrics of the trading backtest: a model that never traded cannot win on them.
TRADING_METRICS = frozenset({"sharpe", "sharpe_ci_low", "sortino", "annual_log_return",
                             "total_log_return", "win_rate_trades", "hit_rate"})


def _no_trades(row: Mapping[str, Any]) -> bool:
    """True when the row says it made no trade (``n_trades`` 0 or null); rows without the
    key (callers that do not track trades) are not judged."""
    if "n_trades" not in row:
        return False
    n = _value(row, "n_trades")
    return math.isnan(n) or n <= 0


def _baseline_value(row: Mapping[str, Any], metric: str) -> float:
    """A baseline's ``metric``; one that never traded (flat) earned nothing: its undefined
    Sharpe counts as 0 in the comparison (a challenger must still beat doing nothing)."""
    v = _value(row, metric)
    return 0.0 if math.isnan(v) and metric in TRADING_METRICS and _no_trades(row) else v


def _baseline_map(baselines: Baselines) -> dict[str, Mapping[str, Any]]:
    if baselines is None:
        return {}
    if isinstance(baselines, Mapping):
        return dict(baselines)
    return {str(b.get("model", f"baseline_{i}")): b for i, b in enumerate(baselines)}


def choose_champion(
    rows: Sequence[Mapping[str, Any]],
    metric: str,
    higher_is_better: bool,
    current_champion: Mapping[str, Any] | None,
    baselines: Baselines,
    *,
    min_improvement: float = 0.0,
    challenger_key: str | None = None,
    scope: str = OVERALL,
) -> Decision:
    """Pick the best row by ``metric`` and decide whether it replaces ``current_champion``.

    ``min_improvement`` is the margin it must win by. ``challenger_key`` (e.g.
    ``sharpe_ci_low``) compares the challenger's conservative bound instead of its point
    estimate against the baselines and the champion (who are taken at ``metric``). Rows that
    ``equal`` a baseline or member are not candidates; the reason names them."""
    contest = _Contest(metric, higher_is_better, min_improvement, challenger_key, scope)
    d = _choose(rows, current_champion, baselines, contest)
    copies = [r for r in rows if r.get("equals")]
    if copies and d.winner is not None:
        d = Decision(d.promote, d.winner, f"{d.reason}; not candidates: {_copies(copies)}",
                     d.scope, d.metric)
    return d


@dataclass(frozen=True)
class _Contest:
    """What ``choose_champion`` judges on: the metric and its direction, the margin to win
    by, the challenger's conservative key (if any) and the scope named in the reasons."""

    metric: str
    higher_is_better: bool
    min_improvement: float
    challenger_key: str | None
    scope: str

    def beats(self, shown: float, other: float) -> bool:
        sign = 1.0 if self.higher_is_better else -1.0
        return sign * (shown - other) > self.min_improvement

    def decide(self, promote: bool, winner: Mapping[str, Any] | None, reason: str) -> Decision:
        return Decision(promote, winner, reason, self.scope, self.metric)


def _choose(rows: Sequence[Mapping[str, Any]], current_champion: Mapping[str, Any] | None,
            baselines: Baselines, contest: _Contest) -> Decision:
    metric = contest.metric
    sign = 1.0 if contest.higher_is_better else -1.0
    finite = [r for r in rows if not math.isnan(_value(r, metric))]
    copies = [r for r in finite if r.get("equals")]
    candidates = [r for r in finite if not (metric in TRADING_METRICS and _no_trades(r))
                  and not r.get("equals")]
    if not candidates:
        idle = [_label(r) for r in finite if r not in candidates and r not in copies]
        why = "".join([f" ({', '.join(idle)} made no trade)" if idle else "",
                       f" ({_copies(copies)})" if copies else ""])
        return contest.decide(False, None,
                              f"no model in {contest.scope} reports a finite {metric}{why}")
    best = dict(max(candidates, key=lambda r: sign * _value(r, metric)))
    key = contest.challenger_key
    shown = _value(best, key) if key else _value(best, metric)
    if math.isnan(shown):
        return contest.decide(False, best, f"{_label(best)} has no finite {key}")
    what = f"{_label(best)} ({key or metric} = {shown:.6g})"
    lost_to_baselines = _against_baselines(what, shown, baselines, contest)
    if lost_to_baselines is not None:
        return contest.decide(False, best, lost_to_baselines)
    n_baselines = sum(not math.isnan(_baseline_value(b, metric))
                      for b in _baseline_map(baselines).values())
    return _against_champion(best, what, shown, current_champion,
                             f"beats all {n_baselines} baselines on {metric}", contest)


def _against_baselines(what: str, shown: float, baselines: Baselines, contest: _Contest
                       ) -> str | None:
    """Why the best row fails against the baselines (none reports the metric, or it does not
    beat one of them), or ``None`` when it beats every baseline that reports it."""
    metric = contest.metric
    bmap = {k: _baseline_value(b, metric) for k, b in _baseline_map(baselines).items()}
    reporting = {k: v for k, v in bmap.items() if not math.isnan(v)}
    if not reporting:
        return f"no baseline reports {metric}: {what} cannot be shown to beat the baselines"
    lost = [f"{k} ({v:.6g})" for k, v in reporting.items() if not contest.beats(shown, v)]
    if lost:
        return f"{what} does not beat baseline(s) " + ", ".join(lost) + f" on {metric}"
    return None


def _against_champion(best: dict[str, Any], what: str, shown: float,
                      current_champion: Mapping[str, Any] | None, vs_baselines: str,
                      contest: _Contest) -> Decision:
    """Promote ``best`` (which beat the baselines) unless the current champion holds."""
    metric = contest.metric
    if current_champion is None:
        return contest.decide(True, best, f"{what} {vs_baselines}; no current champion")
    if _same(best, current_champion):
        return contest.decide(False, best, f"{_label(best)} is already the champion")
    champ = _value(current_champion, metric)
    if math.isnan(champ):
        return contest.decide(True, best, f"{what} {vs_baselines}; current champion "
                              f"{_label(current_champion)} has no {metric}")
    if not contest.beats(shown, champ):
        margin = f" by more than {contest.min_improvement:g}" if contest.min_improvement else ""
        return contest.decide(False, best, f"{what} does not beat the current champion "
                              f"{_label(current_champion)} ({metric} = {champ:.6g}){margin}")
    return contest.decide(True, best, f"{what} {vs_baselines} and the current champion "
                          f"{_label(current_champion)} ({metric} = {champ:.6g})")


def _copies(rows: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(f"{_label(r)} = {r['equals']}" for r in rows)


def shown_name(row: Mapping[str, Any]) -> str:
    """The model's name, with what it equals when it repeats a baseline or a member."""
    return f"{row.get('model', '')}" + (f" (= {row['equals']})" if row.get("equals") else "")


def choose_champions(
    rows: Sequence[Mapping[str, Any]],
    metric: str,
    higher_is_better: bool,
    current_champions: Mapping[str, Mapping[str, Any] | None],
    baselines: Baselines,
    *,
    min_improvement: float = 0.0,
    challenger_key: str | None = None,
    refused: Mapping[str, str] | None = None,
) -> dict[str, Decision]:
    """One decision per ``family`` found in ``rows`` plus ``overall`` (all rows).

    ``current_champions`` maps a family (or ``overall``) to its current champion row;
    ``refused`` maps a scope to the reason its champion cannot be compared (no decision)."""
    families = sorted({str(r["family"]) for r in rows if r.get("family") is not None})
    scopes = {f: [r for r in rows if r.get("family") == f] for f in families}
    scopes[OVERALL] = list(rows)
    refused = dict(refused or {})
    out = {
        s: choose_champion(rs, metric, higher_is_better, current_champions.get(s), baselines,
                           min_improvement=min_improvement, challenger_key=challenger_key,
                           scope=s)
        for s, rs in scopes.items()
    }
    for s, why in refused.items():
        if s in out:
            out[s] = Decision(False, out[s].winner, f"comparison refused: {why}", s, metric)
    return out


# --- like for like ---------------------------------------------------------------------

POOLED = "pooled"


def _is_baseline(r: Mapping[str, Any]) -> bool:
    return r.get("family") == "baseline" or str(r.get("model", "")).startswith("baseline:")


def _newest(rows: Sequence[Mapping[str, Any]], key: Any) -> dict[Any, dict[str, Any]]:
    out: dict[Any, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: str(r.get("evaluated_at") or "")):
        out[key(r)] = dict(r)
    return out


def rows_on_protocol(evaluations: Sequence[Mapping[str, Any]], protocol_id: str | None = None
                     ) -> tuple[str | None, list[dict[str, Any]], dict[str, dict[str, Any]],
                                list[dict[str, Any]]]:
    """``(protocol, models, baselines, elsewhere)``: the protocol of the newest pooled model
    row (unless given); the newest pooled row per model version and per baseline on it; and
    the newest pooled row of each model that has none on it (not compared)."""
    pooled = [r for r in evaluations if str(r.get("fold")) == POOLED and r.get("protocol_id")]
    models = [r for r in pooled if not _is_baseline(r)]
    if protocol_id is None:
        if not models:
            return None, [], {}, []
        protocol_id = max(models, key=lambda r: str(r.get("evaluated_at") or ""))["protocol_id"]
    here = [r for r in pooled if r["protocol_id"] == protocol_id]
    newest = _newest([r for r in here if not _is_baseline(r)], lambda r: r.get("model"))
    baselines = {k.removeprefix("baseline:"): v for k, v in _newest(
        [r for r in here if _is_baseline(r)], lambda r: r.get("model")).items()}
    elsewhere = [r for m, r in _newest(models, lambda r: r.get("model")).items()
                 if m not in newest]
    return protocol_id, list(newest.values()), baselines, elsewhere


def champion_on_protocol(
    champion: Mapping[str, Any],
    evaluations: Sequence[Mapping[str, Any]],
    protocol_id: str,
    rescore: Callable[[Mapping[str, Any]], Sequence[Mapping[str, Any]]] | None,
) -> tuple[dict[str, Any] | None, str]:
    """The champion's pooled row on ``protocol_id``: found, else re-scored by ``rescore``
    (which returns the new rows, e.g. after evaluating the registered artifact); ``(None,
    reason)`` when neither gives one."""
    def mine(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        return [r for r in rows if str(r.get("fold")) == POOLED
                and r.get("protocol_id") == protocol_id and not _is_baseline(r)
                and r.get("family") == champion.get("family")
                and str(r.get("version")) == str(champion.get("version"))]

    hit = mine(evaluations)
    if hit:
        return dict(max(hit, key=lambda r: str(r.get("evaluated_at") or ""))), "found"
    label = f"{champion.get('model') or champion.get('family')} v{champion.get('version')}"
    if rescore is None:
        return None, f"champion {label} has no evaluation on protocol {protocol_id}"
    try:
        new = mine(rescore(champion))
    except Exception as e:  # the reason is the product: the caller refuses with it
        return None, f"champion {label} could not be re-scored on protocol {protocol_id}: {e}"
    if not new:
        return None, (f"champion {label} was re-scored but not on protocol {protocol_id} "
                      "(other folds, data or costs)")
    return dict(new[-1]), "re-scored"


def verdict(decision: Decision, has_champion: bool) -> str:
    """``PROMOTED``, ``kept`` (a champion exists and stays) or ``no champion yet``."""
    if decision.promote:
        return "PROMOTED"
    return "kept" if has_champion else "no champion yet"


def baseline_rows(baselines: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Baseline metric dicts as leaderboard rows (``family = "baseline"``)."""
    return [{"model": k, "family": "baseline", **dict(v)} for k, v in baselines.items()]


# --- references: shown beside the candidates, never compared ----------------------------

ORACLE = "oracle"
REFERENCE = "reference"


def test_period(rows: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    """First and last test bar (ISO UTC) over ``rows`` (pooled rows of one protocol)."""
    starts = [str(r["test_start"]) for r in rows if r.get("test_start")]
    ends = [str(r["test_end"]) for r in rows if r.get("test_end")]
    return (min(starts), max(ends)) if starts and ends else None


def protocol_roots(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Roots the rows were scored on (the keys of their ``sharpe_by_root``)."""
    roots: set[str] = set()
    for r in rows:
        by_root = r.get("sharpe_by_root")
        if isinstance(by_root, str):
            try:
                by_root = json.loads(by_root)
            except ValueError:
                by_root = None
        if isinstance(by_root, Mapping):
            roots.update(str(k) for k in by_root)
    return sorted(roots)


def oracle_row(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The generator's oracle (``foxhunt_pipeline.synthetic.oracle_summary``) as a reference
    row: pooled over roots like the candidates' pooled rows, ``None`` where undefined."""
    pooled = summary["pooled"]
    row: dict[str, Any] = {
        "model": ORACLE, "family": REFERENCE, "sharpe": pooled.get("sharpe"),
        "annual_log_return": pooled.get("annual_log_return"), "n_trades": pooled.get("trades"),
        "turnover": pooled.get("turnover"), "n_bars": pooled.get("n_bars"),
    }
    for root, stats in summary.get("per_root", {}).items():
        row[f"sharpe_{root}"] = stats.get("sharpe")
    return row


def oracle_note(summary: Mapping[str, Any], first_day: str, last_day: str) -> str:
    """One line saying what the ``oracle`` row is and that it competes with nobody."""
    pooled = summary["pooled"]
    per_root = ", ".join(f"{r} {_fmt(s.get('sharpe'))}"
                         for r, s in summary.get("per_root", {}).items())
    cfg = (summary.get("generator") or [{}])[0].get("oracle", {})
    cost = (f"{cfg['cost_ticks']:g} tick + ${cfg['fee_per_contract']:g} fee per side"
            if {"cost_ticks", "fee_per_contract"} <= cfg.keys() else "its own cost model")
    idle = " (it never traded: no predictable component)" if not pooled.get("trades") else ""
    return (f"`{ORACLE}` is a reference, not a candidate: the generator's oracle, which knows "
            f"the latent process, over the test trade dates {first_day} .. {last_day} "
            f"({_days(len(summary.get('days', [])))}), after {cost}; Sharpe per root "
            f"{per_root or '-'}{idle}. It is never champion and not counted in the Bonferroni "
            "comparisons; the gap to it is the signal the models leave on the table.")


def _days(n: int) -> str:
    return f"{n} landed day" + ("" if n == 1 else "s")


def _fmt(v: Any) -> str:
    f = _value({"v": v}, "v")
    return "-" if math.isnan(f) else f"{f:.3g}"


DEFAULT_COLUMNS = ("sharpe", "sharpe_ci_low", "n_trades", "turnover", "hit_rate", "ic",
                   "rank_ic", "icir", "ic_ci_low", "annual_log_return", "max_drawdown",
                   "q_risk_p50", "coverage_80", "latency_ms_p95")


def leaderboard_markdown(
    rows: Sequence[Mapping[str, Any]],
    metric: str | None = None,
    higher_is_better: bool = True,
    columns: Sequence[str] = DEFAULT_COLUMNS,
    references: Sequence[Mapping[str, Any]] = (),
) -> str:
    """Every model and baseline side by side, best first by ``metric`` (missing last); the
    ``references`` (the oracle) follow, unranked."""
    cols = [c for c in columns
            if any(not math.isnan(_value(r, c)) for r in [*rows, *references])]
    if metric and metric not in cols:
        cols.insert(0, metric)
    ordered = list(rows)
    if metric:
        sign = 1.0 if higher_is_better else -1.0
        ordered.sort(key=lambda r: (math.isnan(_value(r, metric)),
                                    -sign * (0.0 if math.isnan(_value(r, metric))
                                             else _value(r, metric))))
    head = ["model", "family", "version", *cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in [*ordered, *references]:
        cells = [shown_name(r), str(r.get("family", "") or ""),
                 "" if r.get("version") is None else str(r.get("version"))]
        cells += ["-" if math.isnan(_value(r, c)) else f"{_value(r, c):.4g}" for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
