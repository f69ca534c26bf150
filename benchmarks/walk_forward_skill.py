"""Skill where skill exists, none where none does, for every model family (issues 13, 23).
``generate(days=20, roots=("ES", "ZN"), seed)`` with and without ``random_walk``, through the
real data path (DBN decode -> continuous -> features -> training dataset), then the
walk-forward protocol with the demo profile's fold and model sizes (``PROFILES["demo"]``):
TFT and Mamba-2 retrained per fold, the ensemble of the fold's forecasters (weights refitted
on the fold's validation split), DQN and PPO observing the fold's own forecasters, beside
every baseline (LightGBM included); CIs at the evaluation asset's Bonferroni level (the five
families + the baselines). Fold forecasters are trained once per fold and shared through the
cache, as the evaluation assets share them.

    nice python benchmarks/walk_forward_skill.py [--days 20] [--roots ES,ZN]
        [--seeds 7,8,9] [--families tft,mamba2,ensemble,dqn,ppo] [--no-lightgbm]

Prints, per seed and dataset, one row per candidate (pooled over the folds: sharpe,
sharpe_ci_low, ic, ic_ci_low, pinball, n_trades, the candidate's wall time) and whether it
shows skill (both lower bounds > 0; agents have no IC, so Sharpe only). No timing is
asserted; the skill claim is asserted in CI by ``tests/synthetic/test_walk_forward_skill.py``
at smaller sizes.
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
from foxhunt_pipeline.storage.model_store import FAMILIES as MODEL_FAMILIES
from models.agents.train import DQNConfig, PPOConfig
from models.evaluation.candidates import (
    Candidate,
    climatology_candidate,
    lightgbm_candidate,
    trading_baselines,
)
from models.evaluation.family_candidates import (
    agent_candidate,
    ensemble_candidate,
    fold_forecaster,
    forecaster_candidate,
)
from models.evaluation.walk_forward import RowPool, WalkForwardConfig, walk_forward
from models.mamba2.model import Mamba2Config
from models.registry import dataset_model_config
from models.tft.model import TFTConfig
from models.training.loop import TrainConfig

try:
    from tests.walk_forward_data import generated_pool
except ModuleNotFoundError:  # run as a script: the repository root is not on the path
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.walk_forward_data import generated_pool

MODEL_CONFIGS = {"tft": TFTConfig, "mamba2": Mamba2Config}
AGENT_CONFIGS = {"dqn": DQNConfig, "ppo": PPOConfig}
FAMILIES = ("tft", "mamba2", "ensemble", "dqn", "ppo")
N_FAMILIES = len(MODEL_FAMILIES)  # every registered family makes skill claims on the protocol
#: the Dagster Config name of a TrainConfig field, where they differ
CONFIG_NAMES = {"learning_rate": "lr"}


def forecaster_setup(family: str, pool: RowPool, profile: str) -> tuple[dict, TrainConfig]:
    """The model config and ``TrainConfig`` of ``foxhunt-<family>`` at the profile's sizes
    (model fields to the model config, the rest to ``TrainConfig``, as the asset splits them)."""
    sizes = {CONFIG_NAMES.get(k, k): v
             for k, v in PROFILES[profile].get(f"{family}_model", {}).items()}
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
        name = f"foxhunt-{family}"
        if family in MODEL_CONFIGS:
            mc, tc = setups[family]
            out.append(forecaster_candidate(name, family, mc, tc, cache_dir=cache))
        elif family == "ensemble":
            members = {f"foxhunt-{f}": forecaster_candidate(f"foxhunt-{f}", f, *setups[f],
                                                            cache_dir=cache)
                       for f in MODEL_CONFIGS}
            out.append(ensemble_candidate(name, members))
        else:
            cls = AGENT_CONFIGS[family]
            sizes = PROFILES[profile].get(f"{family}_agent", {})
            known = {f.name for f in dataclasses.fields(cls)}
            config = cls(**{k: v for k, v in sizes.items() if k in known}, device="cpu")
            out.append(agent_candidate(name, family, config, fold))
    return out


def run(pool: RowPool, families: list[str], lightgbm: bool, profile: str, cache: Path,
        seconds: dict[str, float]):
    baselines = [*trading_baselines((1,)), climatology_candidate()]
    if lightgbm:
        baselines.append(lightgbm_candidate(seed=0, **PROFILES[profile].get("lightgbm", {})))
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=int, default=20)
    ap.add_argument("--roots", default="ES,ZN")
    ap.add_argument("--seeds", default="7")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--no-lightgbm", action="store_true")
    ap.add_argument("--no-random-walk", action="store_true")
    ap.add_argument("--profile", default="demo")
    args = ap.parse_args()
    torch.set_num_threads(1)  # a shared box: one thread is the fair, repeatable setting
    families = [f for f in args.families.split(",") if f]
    roots = tuple(args.roots.split(","))
    print(f"profile {args.profile}: walk_forward {PROFILES[args.profile]['walk_forward']}, "
          + ", ".join(f"{k} {v}" for k, v in PROFILES[args.profile].items()
                      if k.endswith(("_model", "_agent"))))
    total = time.perf_counter()
    summary: dict[tuple[int, bool], dict[str, bool]] = {}
    for seed in (int(s) for s in args.seeds.split(",")):
        for random_walk in (False,) if args.no_random_walk else (False, True):
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                pool = generated_pool(Path(tmp), days=args.days, roots=roots, seed=seed,
                                      random_walk=random_walk)
                t1 = time.perf_counter()
                seconds: dict[str, float] = {}
                result = run(pool, families, not args.no_lightgbm, args.profile,
                             Path(tmp) / "fold_models", seconds)
                t2 = time.perf_counter()
            first = result.candidates[next(iter(result.candidates))]
            print(f"\n== seed {seed}, {'random walk' if random_walk else 'latent drift'}: "
                  f"{pool.rows.n_rows} rows, {len(result.folds)} folds, "
                  f"{int(first.pooled['n_bars'])} pooled test bars, CI level "
                  f"{first.pooled['ci_level']:.4f}; data {t1 - t0:.1f} s, walk-forward "
                  f"{t2 - t1:.1f} s")
            print(table(result, seconds))
            summary[(seed, random_walk)] = {n: shows_skill(c.pooled)
                                            for n, c in result.candidates.items()}
    print("\n== skill (Sharpe CI low > 0, and IC CI low > 0 for forecasters) per seed")
    names = sorted({n for v in summary.values() for n in v})
    for (seed, rw), skill in summary.items():
        shown = [n for n in names if skill.get(n)]
        print(f"seed {seed} {'random walk ' if rw else 'latent drift'}: "
              + (", ".join(shown) if shown else "none"))
    print(f"\nwall time {time.perf_counter() - total:.1f} s")


if __name__ == "__main__":
    main()
