"""The leaderboard for people: the fp32 walk-forward rows as dicts, the paired cells of the
table, the headline and the markdown text the asset writes."""

from __future__ import annotations

import json

import polars as pl

from models import families
from models.evaluation.leaderboard import leaderboard_markdown
from models.evaluation.paired import PairedComparison
from models.evaluation.promotion import Decision, candidate_key


def _fp32(evaluations: pl.DataFrame) -> pl.DataFrame:
    """The fp32 rows (the other precisions are the quantization's, never compared)."""
    if evaluations.is_empty() or "precision" not in evaluations.columns:
        return evaluations
    return evaluations.filter(pl.col("precision") == "fp32")


def evaluation_row(r: dict) -> dict:
    """A model_evaluations row as a dict, its metrics_json unpacked beside the columns."""
    out = {k: v for k, v in r.items() if k != "metrics_json"}
    for k, v in json.loads(r.get("metrics_json") or "{}").items():
        out.setdefault(k, v)
    out["evaluated_at"] = str(out.get("evaluated_at") or "")
    return out


def evaluation_dicts(evaluations: pl.DataFrame) -> list[dict]:
    """fp32 rows as dicts; rows written before walk-forward (no ``fold``) are left out."""
    df = _fp32(evaluations)
    if df.is_empty() or "fold" not in df.columns or "protocol_id" not in df.columns:
        return []
    return [evaluation_row(r) for r in df.iter_rows(named=True)]


def champion_headline(decision: Decision | None, champion: dict | None) -> str:
    """One line on the overall champion after this run, and how to use it (or why none)."""
    if decision is not None and decision.promote and decision.winner is not None:
        w = decision.winner
    elif champion:
        w = champion
    else:
        why = decision.reason if decision is not None else "no decision"
        return f"**No overall champion yet**: {why}."
    name = families.family(w["family"]).registered_name
    return (f"**Overall champion: {name} v{w['version']}**. Forecast with it: "
            f"`foxhunt predict models:/{name}@champion --root <ROOT>`.")


def champion_label(decision: Decision | None, champion: dict | None) -> str:
    """The overall champion after this run: the promoted one, else the one that holds."""
    if decision is not None and decision.promote and decision.winner is not None:
        return candidate_key(decision.winner)
    return candidate_key(champion) if champion else "none yet"


def paired_cells(rows: list[dict], comparison: PairedComparison | None,
                  champion: dict | None, naive: list[str]) -> None:
    """Per row, its paired Sharpe difference to the champion and to the best naive baseline
    (with CIs) and its MCS membership, as the table's text cells."""
    if comparison is None:
        return
    present = [b for b in naive if b in comparison.names]
    best = max(present, key=lambda b: comparison.sharpe[b]) if present else None
    champ = candidate_key(champion) if champion else None
    for r in rows:
        key = candidate_key(r)
        if key not in comparison.names:
            continue
        r["mcs"] = "yes" if comparison.in_mcs(key) else (
            f"no (p {comparison.mcs_pvalues.get(key, float('nan')):.2g})")
        if champ in comparison.names and key != champ:
            r["vs_champion"] = comparison.diff(key, champ).describe()
        if best is not None and key != best:
            r["vs_best_baseline"] = comparison.diff(key, best).describe()


PAIRED_COLUMNS = ("vs_champion", "vs_best_baseline", "mcs")


def leaderboard_text(protocol: str, rows: list[dict], compared: list[dict],
                      comparison: PairedComparison | None, oracle: dict | None, oracle_line: str,
                      decision_lines: list[str], elsewhere: list[dict]) -> str:
    """The leaderboard as markdown: the table, the oracle line, the decisions and the rows
    evaluated on another protocol."""
    table = leaderboard_markdown(compared, "sharpe", True,
                                 references=[oracle] if oracle else [],
                                 text_columns=PAIRED_COLUMNS if comparison else ())
    level = next((r.get("ci_level") for r in rows if r.get("ci_level") is not None), None)
    paired = ("" if comparison is None else
              f" Paired Sharpe differences (vs_champion, vs_best_baseline) over "
              f"{comparison.n_bars} test bars, stationary bootstrap (block "
              f"{comparison.block_length:.1f} bars), CIs at the family-wise level "
              f"{comparison.level:.4f}; mcs: in the 90% Model Confidence Set on per-bar "
              "losses (-P&L).")
    head = ("## Leaderboard (by Sharpe; promotion by the paired rule)\n\n"
            f"Protocol `{protocol}`: pooled over the walk-forward test folds; sharpe_ci_low at "
            f"the Bonferroni-adjusted level {'-' if level is None else f'{float(level):.4f}'}; "
            f"'-' = undefined.{paired}")
    text = (f"{head}\n\n{table}\n\n{oracle_line}\n\n### Champion decisions\n\n"
            + "\n".join(decision_lines))
    if elsewhere:
        text += "\n\n### Not compared (evaluated on another protocol)\n\n" + "\n".join(
            f"- {r['model']} v{r.get('version')}: protocol `{r['protocol_id']}`" for r in elsewhere)
    return text
