"""Champion / challenger decisions, pure: rows of metrics in, a decision with its reason out.

A row is a flat dict with ``model`` (name), optionally ``family`` (``tft``, ``dqn`` ...) and
``version`` (MLflow model version), and metric values. The challenger of a scope is its
best row by ``metric``; it is promoted only when it beats every baseline that reports the
metric *and* the current champion. Rows and baselines without a finite value of the metric
cannot win and cannot be beaten: a scope where no baseline reports it promotes nobody.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
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
    estimate against the baselines and the champion (who are taken at ``metric``)."""
    sign = 1.0 if higher_is_better else -1.0
    candidates = [r for r in rows if not math.isnan(_value(r, metric))]
    if not candidates:
        return Decision(False, None, f"no model in {scope} reports a finite {metric}", scope,
                        metric)
    best = dict(max(candidates, key=lambda r: sign * _value(r, metric)))
    shown = _value(best, challenger_key) if challenger_key else _value(best, metric)
    what = f"{_label(best)} ({challenger_key or metric} = {shown:.6g})"
    if math.isnan(shown):
        return Decision(False, best, f"{_label(best)} has no finite {challenger_key}", scope,
                        metric)

    def beats(other: float) -> bool:
        return sign * (shown - other) > min_improvement

    bmap = {k: _value(b, metric) for k, b in _baseline_map(baselines).items()}
    reporting = {k: v for k, v in bmap.items() if not math.isnan(v)}
    if not reporting:
        return Decision(False, best, f"no baseline reports {metric}: {what} cannot be shown "
                        "to beat the baselines", scope, metric)
    lost = [f"{k} ({v:.6g})" for k, v in reporting.items() if not beats(v)]
    if lost:
        return Decision(False, best, f"{what} does not beat baseline(s) " + ", ".join(lost)
                        + f" on {metric}", scope, metric)
    vs_baselines = f"beats all {len(reporting)} baselines on {metric}"

    if current_champion is None:
        return Decision(True, best, f"{what} {vs_baselines}; no current champion", scope, metric)
    if _same(best, current_champion):
        return Decision(False, best, f"{_label(best)} is already the champion", scope, metric)
    champ = _value(current_champion, metric)
    if math.isnan(champ):
        return Decision(True, best, f"{what} {vs_baselines}; current champion "
                        f"{_label(current_champion)} has no {metric}", scope, metric)
    if not beats(champ):
        margin = f" by more than {min_improvement:g}" if min_improvement else ""
        return Decision(False, best, f"{what} does not beat the current champion "
                        f"{_label(current_champion)} ({metric} = {champ:.6g}){margin}",
                        scope, metric)
    return Decision(True, best, f"{what} {vs_baselines} and the current champion "
                    f"{_label(current_champion)} ({metric} = {champ:.6g})", scope, metric)


def choose_champions(
    rows: Sequence[Mapping[str, Any]],
    metric: str,
    higher_is_better: bool,
    current_champions: Mapping[str, Mapping[str, Any] | None],
    baselines: Baselines,
    *,
    min_improvement: float = 0.0,
    challenger_key: str | None = None,
) -> dict[str, Decision]:
    """One decision per ``family`` found in ``rows`` plus ``overall`` (all rows).

    ``current_champions`` maps a family (or ``overall``) to its current champion row."""
    families = sorted({str(r["family"]) for r in rows if r.get("family") is not None})
    scopes = {f: [r for r in rows if r.get("family") == f] for f in families}
    scopes[OVERALL] = list(rows)
    return {
        s: choose_champion(rs, metric, higher_is_better, current_champions.get(s), baselines,
                           min_improvement=min_improvement, challenger_key=challenger_key,
                           scope=s)
        for s, rs in scopes.items()
    }


def baseline_rows(baselines: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Baseline metric dicts as leaderboard rows (``family = "baseline"``)."""
    return [{"model": k, "family": "baseline", **dict(v)} for k, v in baselines.items()]


DEFAULT_COLUMNS = ("sharpe", "sharpe_ci_low", "annual_log_return", "max_drawdown",
                   "directional_accuracy", "q_risk_p50", "q_risk_p90", "coverage_80",
                   "latency_ms_p95")


def leaderboard_markdown(
    rows: Sequence[Mapping[str, Any]],
    metric: str | None = None,
    higher_is_better: bool = True,
    columns: Sequence[str] = DEFAULT_COLUMNS,
) -> str:
    """Every model and baseline side by side, best first by ``metric`` (missing last)."""
    cols = [c for c in columns if any(not math.isnan(_value(r, c)) for r in rows)]
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
    for r in ordered:
        cells = [str(r.get("model", "")), str(r.get("family", "") or ""),
                 "" if r.get("version") is None else str(r.get("version"))]
        cells += ["-" if math.isnan(_value(r, c)) else f"{_value(r, c):.4g}" for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
