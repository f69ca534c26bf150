"""The leaderboard's rows, pure: which rows are compared, the champion's row, references
and the markdown table. Who wins is ``models.evaluation.promotion``.

A row is a flat dict with ``model`` (name), optionally ``family`` (``tft``, ``dqn`` ...) and
``version`` (MLflow model version), and metric values; a row that ``equals`` a baseline (the
same forecasts or positions on every test bar, or an ensemble weighted all on one member) is
shown as that baseline or member.

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
from typing import Any


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


def shown_name(row: Mapping[str, Any]) -> str:
    """The model's name, with what it equals when it repeats a baseline or a member."""
    return f"{row.get('model', '')}" + (f" (= {row['equals']})" if row.get("equals") else "")


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
    text_columns: Sequence[str] = (),
) -> str:
    """Every model and baseline side by side, best first by ``metric`` (missing last); the
    ``references`` (the oracle) follow, unranked. ``text_columns`` (the paired comparisons)
    are shown as the rows give them, after the version."""
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
    head = ["model", "family", "version", *text_columns, *cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in [*ordered, *references]:
        cells = [shown_name(r), str(r.get("family", "") or ""),
                 "" if r.get("version") is None else str(r.get("version")),
                 *(str(r.get(c) or "-") for c in text_columns)]
        cells += ["-" if math.isnan(_value(r, c)) else f"{_value(r, c):.4g}" for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
