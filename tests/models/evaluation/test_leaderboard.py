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


# --- like for like (issue 13) ------------------------------------------------------------

from models.evaluation.leaderboard import (  # noqa: E402
    champion_on_protocol,
    rows_on_protocol,
    verdict,
)


def pooled(model, protocol, at, sharpe, version="", family=None, **kw):
    fam = family or ("baseline" if model.startswith("baseline:") else model.split("-")[-1])
    return {"model": model, "family": fam, "version": version, "fold": "pooled",
            "protocol_id": protocol, "evaluated_at": at, "sharpe": sharpe,
            "sharpe_ci_low": sharpe - 0.5, "n_trades": 10.0, **kw}


def test_a_model_that_never_traded_cannot_be_champion_by_sharpe():
    idle = row("foxhunt-ppo", 0.0, family="ppo", n_trades=0.0, sharpe_ci_low=0.0)
    busy = row("foxhunt-tft", 0.9, n_trades=12.0, sharpe_ci_low=0.5)
    d = choose_champion([idle, busy], "sharpe", True, None, {"flat": {"sharpe": 0.0}},
                        challenger_key="sharpe_ci_low")
    assert d.promote and d.winner["model"] == "foxhunt-tft"
    alone = choose_champion([idle], "sharpe", True, None, {"flat": {"sharpe": -1.0}})
    assert not alone.promote and "made no trade" in alone.reason
    assert verdict(alone, has_champion=False) == "no champion yet"
    assert verdict(alone, has_champion=True) == "kept"


def test_a_deep_model_must_beat_lightgbm():
    d = choose_champion([row("foxhunt-tft", 1.0, sharpe_ci_low=0.4, n_trades=5.0)], "sharpe",
                        True, None, {"flat": {"sharpe": 0.0}, "lightgbm": {"sharpe": 0.6}},
                        challenger_key="sharpe_ci_low")
    assert not d.promote and "lightgbm" in d.reason


def test_only_rows_of_the_newest_protocol_are_compared():
    evals = [pooled("foxhunt-tft", "old", "2024-01-01", 3.0, version="1"),
             pooled("baseline:flat", "old", "2024-01-01", 0.0),
             pooled("foxhunt-tft", "new", "2024-02-01", 0.8, version="2"),
             pooled("foxhunt-dqn", "old", "2024-01-02", 2.0, version="1"),
             pooled("baseline:flat", "new", "2024-02-01", 0.0),
             {**pooled("foxhunt-tft", "new", "2024-02-01", 9.0, version="2"), "fold": "1"}]
    protocol, models, baselines, elsewhere = rows_on_protocol(evals)
    assert protocol == "new"
    assert [(r["model"], r["sharpe"]) for r in models] == [("foxhunt-tft", 0.8)]
    assert set(baselines) == {"flat"} and baselines["flat"]["protocol_id"] == "new"
    assert [r["model"] for r in elsewhere] == ["foxhunt-dqn"]


def test_a_champion_from_an_older_period_is_rescored_before_the_comparison():
    evals = [pooled("foxhunt-tft", "old", "2024-01-01", 3.0, version="1"),
             pooled("foxhunt-tft", "new", "2024-02-01", 0.8, version="2")]
    calls = []

    def rescore(champ):
        calls.append(champ["version"])
        return [pooled("foxhunt-tft", "new", "2024-02-02", 0.2, version="1")]

    champ, how = champion_on_protocol({"family": "tft", "version": "1", "model": "foxhunt-tft"},
                                      evals, "new", rescore)
    assert calls == ["1"] and how == "re-scored" and champ["sharpe"] == 0.2
    # compared on the same protocol, the challenger wins (its old-period 3.0 is not used)
    d = choose_champion([evals[1]], "sharpe", True, champ, {"flat": {"sharpe": 0.0}},
                        challenger_key="sharpe_ci_low")
    assert d.promote and "0.2" in d.reason
    found, how = champion_on_protocol({"family": "tft", "version": "2"}, evals, "new", rescore)
    assert how == "found" and calls == ["1"]


def test_a_comparison_that_cannot_be_made_is_refused_with_its_reason():
    evals = [pooled("foxhunt-tft", "new", "2024-02-01", 0.8, version="2")]

    def broken(champ):
        raise FileNotFoundError("checkpoint artifact missing")

    champ, why = champion_on_protocol({"family": "tft", "version": "1"}, evals, "new", broken)
    assert champ is None and "checkpoint artifact missing" in why
    _, why2 = champion_on_protocol({"family": "tft", "version": "1"}, evals, "new",
                                   lambda c: [pooled("foxhunt-tft", "other", "x", 1.0, "1")])
    assert "not on protocol new" in why2
    ds = choose_champions(evals, "sharpe", True, {"tft": None}, {"flat": {"sharpe": 0.0}},
                          refused={"tft": why})
    assert not ds["tft"].promote and ds["tft"].reason.startswith("comparison refused:")
    assert ds[OVERALL].promote  # other scopes still decide


def test_a_model_that_equals_a_baseline_is_shown_as_such_and_never_promoted():
    copy = row("foxhunt-ensemble", 0.9, family="ensemble", equals="baseline:climatology")
    real = row("foxhunt-tft", 0.6)
    d = choose_champion([copy, real], "sharpe", True, None, BASELINES)
    assert d.promote and d.winner["model"] == "foxhunt-tft"
    assert "foxhunt-ensemble v1 = baseline:climatology" in d.reason
    alone = choose_champion([copy], "sharpe", True, None, BASELINES)
    assert not alone.promote and "= baseline:climatology" in alone.reason
    md = leaderboard_markdown([copy, real], "sharpe")
    assert "| foxhunt-ensemble (= baseline:climatology) | ensemble |" in md


def test_an_ensemble_with_all_weight_on_one_member_is_that_member():
    from models.ensemble.weights import sole_member

    assert sole_member({"tft": 0.0, "mamba2": 0.0, "climatology": 1.0}) == "climatology"
    assert sole_member({"tft": 0.4, "mamba2": 0.6}) is None
