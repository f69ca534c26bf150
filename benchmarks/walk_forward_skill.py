"""Skill where skill exists, none where none does, and who would be champion, for every
model family (issues 13, 23, 37). ``generate(days=20, roots=("ES", "ZN"), seed)`` with and
without ``random_walk``, through the real data path (DBN decode -> continuous -> features ->
training dataset), then the walk-forward protocol with the demo profile's fold and model
sizes (``PROFILES["demo"]``): TFT, Mamba-2 and LightGBM retrained per fold, the ensemble of
the fold's forecasters (weights refitted on the fold's validation split), DQN and PPO
observing the fold's own forecasters, beside the naive baselines; CIs at the evaluation
asset's Bonferroni level. Fold forecasters are trained once per fold and shared through the
cache, as the evaluation assets share them. Then the leaderboard's paired rule
(``models.evaluation.promotion``) on the pooled test bars, as on a new home (no champion).

    nice python benchmarks/walk_forward_skill.py [--days 20] [--roots ES,ZN]
        [--seeds 7,8,9] [--families tft,mamba2,lightgbm,ensemble,dqn,ppo]
        [--no-random-walk | --only-random-walk]

Prints, per seed and dataset, one row per candidate (pooled over the folds: sharpe,
sharpe_ci_low, ic, ic_ci_low, pinball, n_trades, the candidate's wall time) and whether it
shows skill (both lower bounds > 0; agents have no IC, so Sharpe only); then per family its
paired Sharpe difference to LightGBM and to the promoted champion with CIs, its MCS
membership, and the decision; at the end the test dates and retrainings per dataset, the
CI width reached, and the promotions per seed (on a random walk the target is none). No
timing is asserted; the skill claim is asserted in CI by
``tests/synthetic/test_walk_forward_skill.py`` at smaller sizes.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from foxhunt_pipeline.config.profiles import PROFILES
from models import families as registry
from models.evaluation.candidates import (
    Candidate,
    lightgbm_candidate,
    naive_baselines,
)
from models.evaluation.family_candidates import (
    agent_candidate,
    ensemble_candidate,
    fold_forecaster,
    forecaster_candidate,
)
from models.evaluation.new_home import decide_new_home
from models.evaluation.row_pool import RowPool
from models.evaluation.walk_forward import WalkForwardConfig, walk_forward
from models.lightgbm import LightGBMConfig
from models.mamba2.model import Mamba2Config
from models.registry import dataset_model_config
from models.tft.model import TFTConfig
from models.training.loop import TrainConfig, train_fields

try:
    from tests.walk_forward_data import generated_pool
except ModuleNotFoundError:  # run as a script: the repository root is not on the path
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.walk_forward_data import generated_pool

MODEL_CONFIGS = {"tft": TFTConfig, "mamba2": Mamba2Config}
FAMILIES = ("tft", "mamba2", "lightgbm", "ensemble", "dqn", "ppo")
N_FAMILIES = len(registry.ALL)  # every registered family makes skill claims on the protocol
ALPHA = 0.05  # the leaderboard's family-wise error


def forecaster_setup(family: str, pool: RowPool, profile: str) -> tuple[dict, TrainConfig]:
    """The model config and ``TrainConfig`` of ``foxhunt-<family>`` at the profile's sizes
    (model fields to the model config, the rest to ``TrainConfig``, as the asset splits them)."""
    sizes = train_fields(PROFILES[profile].get(f"{family}_model", {}))
    model_fields = {f.name for f in dataclasses.fields(MODEL_CONFIGS[family])}
    model_config = {**dataset_model_config(family, pool.meta),
                    **{k: v for k, v in sizes.items() if k in model_fields}}
    return model_config, TrainConfig(**{k: v for k, v in sizes.items() if k not in model_fields})


def timed(candidate: Candidate, seconds: dict[str, float]) -> Candidate:
    """``candidate`` whose fit and predict add their wall time to ``seconds[name]``."""
    def fit(train):
        t0 = time.perf_counter()
        predict = candidate.fit(train)
        seconds[candidate.name] = seconds.get(candidate.name, 0.0) + time.perf_counter() - t0

        def timed_predict(d):
            t1 = time.perf_counter()
            out = predict(d)
            seconds[candidate.name] += time.perf_counter() - t1
            return out
        return timed_predict
    return Candidate(candidate.name, candidate.kind, fit)


def family_candidates(families: list[str], pool: RowPool, profile: str, cache: Path
                      ) -> list[Candidate]:
    """The families as the evaluation assets build them: forecasters through the fold-model
    cache, the ensemble and the agents on the same fold forecasters."""
    setups = {f: forecaster_setup(f, pool, profile) for f in MODEL_CONFIGS}
    fold: dict[str, Callable] = {f: fold_forecaster(f, mc, tc, cache_dir=cache)
                                 for f, (mc, tc) in setups.items()}
    out = []
    for family in families:
        fam = registry.family(family)
        name = fam.registered_name
        if family in MODEL_CONFIGS:
            mc, tc = setups[family]
            out.append(forecaster_candidate(name, family, mc, tc, cache_dir=cache))
        elif fam.combines:  # the ensemble
            members = {f"foxhunt-{f}": forecaster_candidate(f"foxhunt-{f}", f, *setups[f],
                                                            cache_dir=cache)
                       for f in MODEL_CONFIGS}
            out.append(ensemble_candidate(name, members))
        elif fam.kind == "forecaster":  # LightGBM at the profile's sizes
            sizes = PROFILES[profile].get("lightgbm", {})
            out.append(lightgbm_candidate(LightGBMConfig.from_dict(sizes), name=name))
        else:
            cls = fam.config_class()
            sizes = PROFILES[profile].get(fam.asset, {})
            known = {f.name for f in dataclasses.fields(cls)}
            config = cls(**{k: v for k, v in sizes.items() if k in known}, device="cpu")
            out.append(agent_candidate(name, fam.train_function(), config, fold))
    return out


def run(pool: RowPool, families: list[str], profile: str, cache: Path,
        seconds: dict[str, float]):
    baselines = naive_baselines((1,))
    wf = PROFILES[profile]["walk_forward"]
    bootstrap = int(PROFILES[profile].get("evaluation", {}).get("bootstrap", 1000))
    candidates = [timed(c, seconds)
                  for c in family_candidates(families, pool, profile, cache) + baselines]
    return walk_forward(pool, candidates, WalkForwardConfig(**wf),
                        n_compared=N_FAMILIES + len(baselines), bootstrap=bootstrap)


def _fmt(v: float | None, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if v is None or not math.isfinite(v) else f"{v:{width}.{digits}f}"


def shows_skill(pooled: dict) -> bool:
    """Sharpe CI low > 0, and IC CI low > 0 for a forecaster (an agent has no IC)."""
    ic_low = pooled.get("ic_ci_low", math.nan)
    return pooled["sharpe_ci_low"] > 0 and (ic_low > 0 or not math.isfinite(pooled.get("ic", math.nan)))


def table(result, seconds: dict[str, float]) -> str:
    head = (f"{'candidate':24} {'sharpe':>8} {'sharpe_ci_low':>13} {'ic':>7} {'ic_ci_low':>9} "
            f"{'pinball':>8} {'n_trades':>8} {'wall_s':>7}  skill")
    lines = [head, "-" * len(head)]
    for name, c in result.candidates.items():
        p = c.pooled
        lines.append(f"{name:24} {_fmt(p['sharpe'], 8, 2)} {_fmt(p['sharpe_ci_low'], 13, 2)} "
                     f"{_fmt(p.get('ic'), 7, 3)} {_fmt(p.get('ic_ci_low'), 9, 3)} "
                     f"{_fmt(p.get('pinball_mean'), 8, 4)} {_fmt(p['n_trades'], 8, 0)} "
                     f"{_fmt(seconds.get(name), 7, 1)}  {'yes' if shows_skill(p) else 'no'}")
    return "\n".join(lines)


def paired_report(result, alpha: float = ALPHA, resamples: int = 1000) -> tuple[str, dict]:
    """The leaderboard's rule on the pooled test bars, on a new home (no champion): each
    family's paired Sharpe difference to LightGBM and to the champion it promotes, the MCS,
    and the decision; returns the text and the decisions."""
    home = decide_new_home(result, alpha, resamples)
    cmp, decisions, keys, rows = home.comparison, home.decisions, home.keys, home.families
    overall = decisions["overall"]
    champ = home.champion
    lgb = keys.get("foxhunt-lightgbm")
    head = (f"{'family':18} {'sharpe':>7}  {'vs foxhunt-lightgbm':>24}  {'vs champion':>24}  "
            f"{'mcs':>9}  decision")
    lines = [f"paired rule: {cmp.n_bars} bars, block {cmp.block_length:.1f}, level "
             f"{cmp.level:.4f}; MCS = {', '.join(sorted(cmp.mcs_included))}", head,
             "-" * len(head)]
    for r in rows:
        k = keys[r["model"]]
        vs_lgb = cmp.diff(k, lgb).describe() if lgb and k != lgb else "-"
        vs_champ = cmp.diff(k, champ).describe() if champ and k != champ else "-"
        mcs = "yes" if cmp.in_mcs(k) else f"no {cmp.mcs_pvalues.get(k, math.nan):.2g}"
        d = decisions[r["family"]]
        lines.append(f"{r['model']:18} {cmp.sharpe[k]:7.2f}  {vs_lgb:>24}  {vs_champ:>24}  "
                     f"{mcs:>9}  {'PROMOTED' if d.promote else 'no'} ({d.test})")
    lines.append(f"overall: {'PROMOTED ' + champ if champ else 'no champion'} ({overall.test}): "
                 f"{overall.reason}")
    return "\n".join(lines), decisions


def ci_width(result) -> float:
    """The median width of the families' pooled Sharpe CIs (what more test bars narrow)."""
    widths = [c.pooled["sharpe_ci_high"] - c.pooled["sharpe_ci_low"]
              for n, c in result.candidates.items() if not n.startswith("baseline:")
              and math.isfinite(c.pooled.get("sharpe_ci_high", math.nan))]
    return float(sorted(widths)[len(widths) // 2]) if widths else math.nan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=int, default=20)
    ap.add_argument("--roots", default="ES,ZN")
    ap.add_argument("--seeds", default="7")
    ap.add_argument("--families", default=",".join(FAMILIES))
    rw = ap.add_mutually_exclusive_group()
    rw.add_argument("--no-random-walk", action="store_true")
    rw.add_argument("--only-random-walk", action="store_true")
    ap.add_argument("--profile", default="demo")
    args = ap.parse_args()
    torch.set_num_threads(1)  # a shared box: one thread is the fair, repeatable setting
    families = [f for f in args.families.split(",") if f]
    roots = tuple(args.roots.split(","))
    print(f"profile {args.profile}: walk_forward {PROFILES[args.profile]['walk_forward']}, "
          + ", ".join(f"{k} {v}" for k, v in PROFILES[args.profile].items()
                      if k.endswith(("_model", "_agent"))))
    walks = (True,) if args.only_random_walk else (False,) if args.no_random_walk else (False, True)
    total = time.perf_counter()
    summary: dict[tuple[int, bool], dict[str, bool]] = {}
    promoted: dict[tuple[int, bool], str] = {}
    for seed in (int(s) for s in args.seeds.split(",")):
        for random_walk in walks:
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                pool = generated_pool(Path(tmp), days=args.days, roots=roots, seed=seed,
                                      random_walk=random_walk)
                t1 = time.perf_counter()
                seconds: dict[str, float] = {}
                result = run(pool, families, args.profile, Path(tmp) / "fold_models", seconds)
                t2 = time.perf_counter()
            first = result.candidates[next(iter(result.candidates))]
            test_dates = sum(len(f.test_dates) for f in result.folds)
            print(f"\n== seed {seed}, {'random walk' if random_walk else 'latent drift'}: "
                  f"{pool.rows.n_rows} rows, {len(set(pool.dates))} trade dates, "
                  f"{len(result.folds)} folds (retrainings per family) testing {test_dates} "
                  f"trade dates, {int(first.pooled['n_bars'])} pooled test bars, CI level "
                  f"{first.pooled['ci_level']:.4f}, median Sharpe CI width "
                  f"{ci_width(result):.1f}; data {t1 - t0:.1f} s, walk-forward {t2 - t1:.1f} s")
            print(table(result, seconds))
            text, decisions = paired_report(result)
            print(text)
            summary[(seed, random_walk)] = {n: shows_skill(c.pooled)
                                            for n, c in result.candidates.items()}
            d = decisions["overall"]
            promoted[(seed, random_walk)] = d.winner["model"] if d.promote else ""
    print("\n== skill (Sharpe CI low > 0, and IC CI low > 0 for forecasters) per seed")
    names = sorted({n for v in summary.values() for n in v})
    for (seed, rw_), skill in summary.items():
        shown = [n for n in names if skill.get(n)]
        print(f"seed {seed} {'random walk ' if rw_ else 'latent drift'}: "
              + (", ".join(shown) if shown else "none"))
    print("\n== promotions by the paired rule (overall champion on a new home)")
    for (seed, rw_), who in promoted.items():
        print(f"seed {seed} {'random walk ' if rw_ else 'latent drift'}: {who or 'none'}")
    for rw_ in sorted({k[1] for k in promoted}):
        n = sum(bool(v) for k, v in promoted.items() if k[1] == rw_)
        print(f"{'random walk' if rw_ else 'latent drift'}: promoted on {n} of "
              f"{sum(k[1] == rw_ for k in promoted)} seeds")
    print(f"\nwall time {time.perf_counter() - total:.1f} s")


if __name__ == "__main__":
    main()
