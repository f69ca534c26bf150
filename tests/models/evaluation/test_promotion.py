"""The promotion rule: paired Sharpe tests against the baselines and the champion, and the
Model Confidence Set (``models.evaluation.promotion``, ``models.evaluation.paired``)."""

import numpy as np
import pytest

from models.evaluation.paired import (
    Bars,
    PairedComparison,
    PairedComparisonError,
    aligned_pnl,
    compare,
    family_wise_level,
)
from models.evaluation.promotion import candidate_key, decide, decide_scopes, n_paired_tests

N = 4000
BARS_PER_YEAR = 80_000
BASELINES = ("baseline:flat", "baseline:buy_and_hold", "baseline:momentum_1")


def market(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    r = rng.standard_normal(N) * 1e-4
    mom = np.sign(np.concatenate([[0.0], r[:-1]])) * r - 2e-6
    return {"baseline:flat": np.zeros(N), "baseline:buy_and_hold": r, "baseline:momentum_1": mom}


def skilled(seed: int, edge: float) -> np.ndarray:
    return edge + np.random.default_rng(seed).standard_normal(N) * 1e-4


def row(model: str, version: int, family: str, **kw) -> dict:
    return {"model": model, "version": str(version), "family": family, "n_trades": 100.0, **kw}


def comparison(models: dict[str, np.ndarray], seed: int = 0, n_candidates: int | None = None):
    level = family_wise_level(n_paired_tests(n_candidates or len(models), len(BASELINES)), 0.05)
    return compare({**market(seed), **models}, BARS_PER_YEAR, level=level, resamples=300,
                   seed=seed)


def test_a_clearly_better_challenger_is_promoted_over_a_weaker_champion():
    champ, chall = row("foxhunt-tft", 1, "tft"), row("foxhunt-tft", 2, "tft")
    cmp = comparison({candidate_key(champ): skilled(1, 0.8e-5),
                      candidate_key(chall): skilled(2, 3e-5)})
    d = decide([chall], cmp, BASELINES, champ)
    assert d.promote and d.winner["version"] == "2"
    assert d.test in ("champion", "mcs") and "foxhunt-tft v1" in d.reason


def test_without_a_champion_a_skilled_model_is_promoted_and_says_so():
    r = row("foxhunt-mamba2", 1, "mamba2")
    d = decide([r], comparison({candidate_key(r): skilled(3, 3e-5)}), BASELINES, None)
    assert d.promote and d.test == "no champion" and "beats all 3 baselines" in d.reason


def test_an_equal_challenger_is_not_promoted():
    champ, chall = row("foxhunt-tft", 1, "tft"), row("foxhunt-tft", 2, "tft")
    same = skilled(4, 3e-5)
    cmp = comparison({candidate_key(champ): same, candidate_key(chall): same.copy()})
    d = decide([champ, chall], cmp, BASELINES, champ)
    assert not d.promote and d.winner["version"] == "2"  # ties go to the newer version
    assert d.test == "champion" and "does not beat champion foxhunt-tft v1" in d.reason


def test_an_incumbent_in_the_mcs_holds_against_a_noisy_improvement():
    champ, chall = row("foxhunt-tft", 1, "tft"), row("foxhunt-dqn", 1, "dqn")
    # two different models of the same skill: the challenger's Sharpe is higher by luck
    cmp = comparison({candidate_key(champ): skilled(6, 3e-5), candidate_key(chall): skilled(5, 3e-5)})
    assert cmp.sharpe[candidate_key(chall)] > cmp.sharpe[candidate_key(champ)]
    assert cmp.in_mcs(candidate_key(champ))
    d = decide([champ, chall], cmp, BASELINES, champ)
    assert not d.promote and d.winner["model"] == "foxhunt-dqn"


def test_a_champion_that_no_longer_qualifies_is_replaced():
    champ, chall = row("foxhunt-tft", 1, "tft"), row("foxhunt-tft", 2, "tft")
    # built by hand: the champion fell out of the MCS, though the challenger's Sharpe
    # difference to it is not significant (resamples share one noise draw per name)
    names = (*BASELINES, candidate_key(champ), candidate_key(chall))
    sharpe = dict(zip(names, [0.0, 0.0, -1.0, 10.0, 12.0], strict=True))
    noise = np.random.default_rng(0).standard_normal((500, len(names)))
    boot = np.array([sharpe[n] for n in names]) + noise * np.array([0, 0.5, 0.5, 1, 1])
    cmp = PairedComparison(names, sharpe, boot, 5.0, 0.99,
                           frozenset({candidate_key(chall)}), {candidate_key(champ): 0.02}, N)
    assert not cmp.diff(candidate_key(chall), candidate_key(champ)).significant
    d = decide([chall], cmp, BASELINES, champ)
    assert d.promote and d.test == "mcs" and "no longer qualifies" in d.reason
    kept = PairedComparison(names, sharpe, boot, 5.0, 0.99,
                            frozenset(names[3:]), {}, N)
    assert not decide([chall], kept, BASELINES, champ).promote


def test_a_model_that_equals_a_baseline_never_wins():
    r = row("foxhunt-ensemble", 1, "ensemble", equals="baseline:buy_and_hold")
    d = decide([r], comparison({candidate_key(r): skilled(9, 3e-5)}), BASELINES, None)
    assert not d.promote and d.winner is None and d.test == "equals"


def test_a_model_no_better_than_a_baseline_is_not_promoted():
    m = market(10)
    r = row("foxhunt-ppo", 1, "ppo")
    d = decide([r], comparison({candidate_key(r): m["baseline:buy_and_hold"] + 1e-7}, seed=10),
               BASELINES, None)
    assert not d.promote and d.test == "baselines" and "baseline:" in d.reason


def test_no_trades_never_wins():
    r = row("foxhunt-dqn", 1, "dqn", n_trades=0.0)
    d = decide([r], comparison({candidate_key(r): skilled(11, 3e-5)}), BASELINES, None)
    assert not d.promote and d.test == "trades"


@pytest.mark.parametrize("seed", [20, 21, 22])
def test_noise_is_never_promoted(seed):
    rows = [row(f"foxhunt-{f}", 1, f) for f in ("tft", "mamba2", "dqn", "ppo")]
    rng = np.random.default_rng(seed)
    cmp = comparison({candidate_key(r): rng.standard_normal(N) * 1e-4 - 1e-6 for r in rows},
                     seed=seed)
    assert not any(d.promote for d in decide_scopes(rows, cmp, BASELINES, {}).values())


def test_scopes_decide_per_family_and_overall_and_refusals_win():
    tft, dqn = row("foxhunt-tft", 1, "tft"), row("foxhunt-dqn", 1, "dqn")
    cmp = comparison({candidate_key(tft): skilled(12, 3e-5), candidate_key(dqn): skilled(13, 1e-5)})
    ds = decide_scopes([tft, dqn], cmp, BASELINES, {}, refused={"dqn": "no rows"})
    assert set(ds) == {"tft", "dqn", "overall"}
    assert ds["overall"].promote and ds["overall"].winner["model"] == "foxhunt-tft"
    assert not ds["dqn"].promote and "comparison refused: no rows" in ds["dqn"].reason


def test_paired_difference_is_narrower_than_the_sharpe_ci_and_ci_covers_it():
    r = skilled(14, 2e-5)
    other = r + np.random.default_rng(15).standard_normal(N) * 0.2e-4
    cmp = compare({"a": r, "b": other}, BARS_PER_YEAR, level=0.95, resamples=300, seed=0)
    d = cmp.diff("a", "b")
    assert d.low <= d.diff <= d.high
    alone = cmp.diff("a", "a")
    assert alone.diff == 0 and alone.low == 0 == alone.high
    # sharing the market's noise: the paired CI is far narrower than either Sharpe's spread
    spread = np.quantile(cmp.boot[:, 0], 0.975) - np.quantile(cmp.boot[:, 0], 0.025)
    assert d.high - d.low < 0.5 * spread


def test_bars_are_aligned_by_root_and_time_and_other_bars_are_refused():
    a = Bars(np.array(["ZN", "ES", "ES"]), np.array([1, 2, 1]), np.array([3.0, 2.0, 1.0]))
    b = Bars(np.array(["ES", "ES", "ZN"]), np.array([1, 2, 1]), np.array([10.0, 20.0, 30.0]))
    out = aligned_pnl({"a": a, "b": b})
    assert out["a"].tolist() == [1.0, 2.0, 3.0] and out["b"].tolist() == [10.0, 20.0, 30.0]
    c = Bars(np.array(["ES", "ES"]), np.array([1, 2]), np.array([1.0, 2.0]))
    with pytest.raises(PairedComparisonError, match="c was scored on other bars"):
        aligned_pnl({"a": a, "c": c})


def test_the_overall_champion_is_always_its_familys_champion():
    """A newer LightGBM that does not beat its own family's champion is not made overall
    champion over the TFT either: overall competes among the families' champions."""
    lgb1, lgb2 = row("foxhunt-lightgbm", 1, "lightgbm"), row("foxhunt-lightgbm", 2, "lightgbm")
    tft = row("foxhunt-tft", 1, "tft")
    # lightgbm v2 is as good as v1 (other luck, higher Sharpe); both far above the TFT
    cmp = comparison({candidate_key(lgb1): skilled(6, 3e-5), candidate_key(lgb2): skilled(5, 3e-5),
                      candidate_key(tft): skilled(30, 0.5e-5)})
    assert cmp.sharpe[candidate_key(lgb2)] > cmp.sharpe[candidate_key(lgb1)]
    ds = decide_scopes([lgb2, tft], cmp, BASELINES, {"lightgbm": lgb1, "tft": tft, "overall": tft})
    assert not ds["lightgbm"].promote  # v1 holds in its family
    assert ds["overall"].promote and ds["overall"].winner["version"] == "1"
    assert ds["overall"].winner["model"] == "foxhunt-lightgbm"


def test_block_length_runs_arch_on_one_blas_thread_and_gives_archs_length(monkeypatch):
    """arch's block-length estimate is ~3 sqrt(n) small dot products per column; split over
    OpenBLAS's threads each cost ~100x the product (a year's leaderboard spent most of its
    time there), so it runs on one thread, and still returns arch's own length."""
    from threadpoolctl import threadpool_info

    import models.evaluation.paired as paired

    seen: list[int] = []
    real = paired.optimal_block_length

    def spy(col):
        seen.extend(lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas")
        return real(col)

    monkeypatch.setattr(paired, "optimal_block_length", spy)
    rng = np.random.default_rng(3)
    e = rng.standard_normal((3000, 2))
    x = e.copy()
    for i in range(1, len(x)):
        x[i] = 0.4 * x[i - 1] + e[i]
    got = paired.block_length(x * 1e-4)
    assert seen and set(seen) == {1}
    expected = max(float(real(x[:, j] * 1e-4)["stationary"].iloc[0]) for j in range(2))
    assert got == pytest.approx(expected, rel=1e-12)
    assert 1.0 < got < len(x) / 4


def test_the_mcs_keeps_no_resample_indices_and_decides_as_arch_does(monkeypatch):
    """arch's MCS keeps every resample's indices "for testing" (resamples x bars integers:
    1.9 GB for a year's pooled bars); ours keeps none, and its set and p-values are those of
    arch's MCS left as it is, on the same losses and random stream."""
    from arch.bootstrap import MCS

    import models.evaluation.paired as paired

    made: list[MCS] = []

    class Spy(MCS):
        def compute(self) -> None:
            made.append(self)
            super().compute()

    monkeypatch.setattr(paired, "MCS", Spy)
    models = {**market(5), "a": skilled(6, 3e-5), "b": skilled(7, 0.0), "c": skilled(8, 1e-5)}
    names = tuple(models)
    x = np.column_stack([models[n] for n in names])

    def run():
        return paired._mcs(x, names, 20.0, 200, np.random.default_rng(4), 0.10)

    ours = run()
    monkeypatch.setattr(paired, "_NotKept", list)  # arch as it is: every resample kept
    theirs = run()
    assert len(made) == 2
    assert len(made[0]._bootstrap_indices) == 0 and len(made[1]._bootstrap_indices) == 200
    assert ours == theirs and 1 <= len(ours[0]) < len(names)


def _gathered_sharpes(x: np.ndarray, idx: np.ndarray, bars_per_year: float) -> np.ndarray:
    """The resample's Sharpes as the leaderboard computed them before issue 41: gather the
    resampled bars, then each column's mean / sd (a column without variation: 0)."""
    r = x[idx]
    mean, sd = r.mean(axis=0), r.std(axis=0, ddof=1)
    flat = sd <= 1e-12 * np.maximum(np.abs(r).max(axis=0), 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(flat, 0.0, mean / np.where(flat, 1.0, sd) * np.sqrt(bars_per_year))


def test_resampled_sharpes_from_bar_counts_are_the_gathered_ones():
    """Issue 41: the paired bootstrap counts how often each bar is drawn instead of gathering
    a year's pooled bars 1,000 times; the Sharpes agree with the gathered ones to ~1e-12."""
    from arch.bootstrap import StationaryBootstrap

    from models.evaluation.paired import _resampled_sharpes

    rng = np.random.default_rng(4)
    n = 20_000
    x = np.column_stack([
        rng.normal(2e-5, 3e-4, n),  # a trader's per-bar net log returns
        rng.normal(-1e-5, 1e-4, n) * (rng.random(n) < 0.3),  # mostly flat, sometimes in
        np.zeros(n),  # never trades
        np.full(n, 1e-4) + rng.normal(0, 1e-6, n),  # almost constant, far from zero
    ])
    draws = [idx for (idx,), _ in StationaryBootstrap(40.0, np.arange(n), seed=rng).bootstrap(50)]
    got = _resampled_sharpes(x, iter(draws), 252 * 390)
    want = np.stack([_gathered_sharpes(x, idx, 252 * 390) for idx in draws])
    assert (got[:, 2] == 0).all() and (want[:, 2] == 0).all()
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=0)
