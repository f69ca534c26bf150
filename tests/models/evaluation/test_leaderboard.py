"""Champion / challenger decisions."""

import math

import pytest

from models.evaluation.leaderboard import (
    OVERALL,
    baseline_rows,
    choose_champion,
    choose_champions,
    leaderboard_markdown,
)

BASELINES = {"flat": {"sharpe": 0.0}, "buy_and_hold": {"sharpe": 0.4},
             "climatology": {"sharpe": -0.1, "q_risk_p50": 1.0}}


def row(model, sharpe, version=1, family="tft", **kw):
    return {"model": model, "version": version, "family": family, "sharpe": sharpe, **kw}


def test_promotes_when_beating_champion_and_every_baseline():
    champ = row("tft", 0.5, version=1)
    d = choose_champion([row("tft", 0.8, version=2), row("dqn", 0.6, family="dqn")], "sharpe",
                        True, champ, BASELINES)
    assert d.promote and d.winner["version"] == 2
    assert "tft v1" in d.reason and "3 baselines" in d.reason


def test_no_promotion_when_a_baseline_wins_and_reason_names_it():
    d = choose_champion([row("tft", 0.3)], "sharpe", True, None, BASELINES)
    assert not d.promote
    assert "buy_and_hold" in d.reason and "flat" not in d.reason
    assert d.winner["model"] == "tft"


def test_no_promotion_when_the_champion_is_better():
    d = choose_champion([row("tft", 0.8, version=3)], "sharpe", True, row("tft", 0.9), BASELINES)
    assert not d.promote and "current champion tft v1" in d.reason


def test_ties_do_not_promote_and_margins_apply():
    champ = row("tft", 0.8, version=1)
    assert not choose_champion([row("tft", 0.8, version=2)], "sharpe", True, champ,
                               BASELINES).promote
    d = choose_champion([row("tft", 0.85, version=2)], "sharpe", True, champ, BASELINES,
                        min_improvement=0.1)
    assert not d.promote and "by more than 0.1" in d.reason


def test_already_champion():
    champ = row("tft", 0.8)
    d = choose_champion([champ, row("tft", 0.5, version=2)], "sharpe", True, champ, BASELINES)
    assert not d.promote and "already the champion" in d.reason


def test_lower_is_better_metric_uses_only_baselines_that_report_it():
    rows = [row("tft", 0.0, q_risk_p50=0.9), row("tft", 0.0, version=2, q_risk_p50=0.95)]
    d = choose_champion(rows, "q_risk_p50", False, None, BASELINES)
    assert d.promote and d.winner["version"] == 1 and "1 baselines" in d.reason
    worse = choose_champion([row("tft", 0.0, q_risk_p50=1.05)], "q_risk_p50", False, None,
                            BASELINES)
    assert not worse.promote and "climatology" in worse.reason


def test_nothing_to_compare_promotes_nobody():
    d = choose_champion([row("tft", math.nan)], "sharpe", True, None, BASELINES)
    assert not d.promote and d.winner is None and "finite sharpe" in d.reason
    d = choose_champion([row("tft", 1.0, latency=1.0)], "latency", False, None, BASELINES)
    assert not d.promote and "no baseline reports latency" in d.reason


def test_conservative_bound_must_clear_the_baselines():
    r = row("tft", 0.9, sharpe_ci_low=0.2)
    d = choose_champion([r], "sharpe", True, None, BASELINES, challenger_key="sharpe_ci_low")
    assert not d.promote and "sharpe_ci_low = 0.2" in d.reason
    assert choose_champion([r], "sharpe", True, None, BASELINES).promote


def test_per_family_and_overall():
    rows = [row("tft", 0.9), row("mamba2", 0.7, family="mamba2"), row("dqn", 0.2, family="dqn")]
    champs = {"tft": row("tft", 0.95, version=0), OVERALL: row("mamba2", 0.6, family="mamba2",
                                                                 version=0)}
    ds = choose_champions(rows, "sharpe", True, champs, BASELINES)
    assert set(ds) == {"tft", "mamba2", "dqn", OVERALL}
    assert not ds["tft"].promote  # champion 0.95 is better
    assert ds["mamba2"].promote  # no champion yet, beats the baselines
    assert not ds["dqn"].promote  # buy-and-hold wins
    assert ds[OVERALL].promote and ds[OVERALL].winner["model"] == "tft"
    assert ds["dqn"].scope == "dqn" and ds["dqn"].metric == "sharpe"


def test_leaderboard_markdown_orders_best_first_with_baselines():
    rows = [row("dqn", 0.2, family="dqn"), row("tft", 0.9), *baseline_rows(BASELINES)]
    rows.append(row("ppo", math.nan, family="ppo"))
    md = leaderboard_markdown(rows, "sharpe")
    lines = md.splitlines()
    assert lines[0].startswith("| model | family | version | sharpe")
    order = [line.split("|")[1].strip() for line in lines[2:]]
    assert order == ["tft", "buy_and_hold", "dqn", "flat", "climatology", "ppo"]
    assert "| climatology | baseline |" in md and "q_risk_p50" in lines[0]
    assert lines[-1].count("-") >= 1


@pytest.mark.parametrize("higher", [True, False])
def test_direction_flips_the_winner(higher):
    rows = [row("a", 0.5), row("b", 0.7)]
    d = choose_champion(rows, "sharpe", higher, None, {"x": {"sharpe": 0.6 if higher else 0.8}})
    assert d.winner["model"] == ("b" if higher else "a")
