"""The leaderboard's rows: like for like (one protocol), the champion's row, the table.
The promotion rule itself: ``test_promotion.py``."""

import math

from models.evaluation.leaderboard import (
    baseline_rows,
    leaderboard_markdown,
)

BASELINES = {"flat": {"sharpe": 0.0}, "buy_and_hold": {"sharpe": 0.4},
             "climatology": {"sharpe": -0.1, "q_risk_p50": 1.0}}


def row(model, sharpe, version=1, family="tft", **kw):
    return {"model": model, "version": version, "family": family, "sharpe": sharpe, **kw}


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


# --- like for like (issue 13) ------------------------------------------------------------

from models.evaluation.leaderboard import (  # noqa: E402
    champion_on_protocol,
    rows_on_protocol,
)


def pooled(model, protocol, at, sharpe, version="", family=None, **kw):
    fam = family or ("baseline" if model.startswith("baseline:") else model.split("-")[-1])
    return {"model": model, "family": fam, "version": version, "fold": "pooled",
            "protocol_id": protocol, "evaluated_at": at, "sharpe": sharpe,
            "sharpe_ci_low": sharpe - 0.5, "n_trades": 10.0, **kw}


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
    # compared on the same protocol: its old-period 3.0 is not used
    assert calls == ["1"] and how == "re-scored" and champ["sharpe"] == 0.2
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


def test_a_model_that_equals_a_baseline_is_shown_as_such():
    copy = row("foxhunt-ensemble", 0.9, family="ensemble", equals="baseline:climatology")
    real = row("foxhunt-tft", 0.6)
    md = leaderboard_markdown([copy, real], "sharpe")
    assert "| foxhunt-ensemble (= baseline:climatology) | ensemble |" in md


def test_an_ensemble_with_all_weight_on_one_member_is_that_member():
    from models.ensemble.weights import sole_member

    assert sole_member({"tft": 0.0, "mamba2": 0.0, "climatology": 1.0}) == "climatology"
    assert sole_member({"tft": 0.4, "mamba2": 0.6}) is None
