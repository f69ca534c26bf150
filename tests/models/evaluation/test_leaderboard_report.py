"""The leaderboard's rows and text without Dagster or MLflow (``models.evaluation.leaderboard_report``)."""

from __future__ import annotations

import json

import polars as pl

from models.evaluation.evaluation_table import float_or_none
from models.evaluation.leaderboard_report import champion_headline, champion_label, evaluation_dicts
from models.evaluation.promotion import Decision


def test_only_fp32_walk_forward_rows_are_compared_and_metrics_json_fills_in():
    rows = pl.DataFrame({
        "model": ["foxhunt-tft", "foxhunt-tft"], "precision": ["fp32", "int8"],
        "fold": ["pooled", "pooled"], "protocol_id": ["p", "p"], "sharpe": [1.5, 1.4],
        "evaluated_at": [None, None],
        "metrics_json": [json.dumps({"sharpe": 9.0, "ic": 0.1}), "{}"],
    })
    [row] = evaluation_dicts(rows)
    assert row["sharpe"] == 1.5 and row["ic"] == 0.1  # a column wins over metrics_json
    assert "metrics_json" not in row and row["evaluated_at"] == ""
    assert evaluation_dicts(rows.drop("fold")) == []  # written before walk-forward


def test_the_headline_names_the_champion_or_why_there_is_none():
    assert champion_headline(None, None) == "**No overall champion yet**: no decision."
    held = {"family": "tft", "model": "foxhunt-tft", "version": "3"}
    refused = Decision(False, None, "beats no baseline", "overall", "bars")
    assert "foxhunt-tft v3" in champion_headline(refused, held)
    assert champion_label(refused, None) == "none yet"


def test_undefined_metrics_are_none_never_zero():
    assert [float_or_none(v) for v in (None, "x", float("nan"), float("inf"), "2")] == \
        [None, None, None, None, 2.0]
