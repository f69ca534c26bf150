"""Skill where skill exists, none where none does: the "Done when" claim of issue 13,
measured exactly. ``generate(days=20, roots=("ES", "ZN"), seed=7)`` with and without
``random_walk``, through the real data path (DBN decode -> continuous -> features ->
training dataset), then the walk-forward protocol with the demo profile's fold sizes and
model sizes (``PROFILES["demo"]``), TFT and Mamba-2 retrained per fold beside every baseline
(LightGBM included), CIs at the evaluation asset's Bonferroni level (4 families + the
baselines).

    nice python benchmarks/walk_forward_skill.py [--days 20] [--roots ES,ZN] [--seed 7]
        [--families tft,mamba2] [--no-lightgbm]

Prints, per dataset, one row per candidate (pooled over the folds: sharpe, sharpe_ci_low,
ic, ic_ci_low, n_trades) and whether it shows skill (both lower bounds > 0), plus the wall
time of each stage. No timing is asserted; the skill claim is asserted in CI by
``tests/synthetic/test_walk_forward_skill.py`` at smaller sizes.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import tempfile
import time
from pathlib import Path

import torch

from foxhunt_pipeline.config.profiles import PROFILES
from foxhunt_pipeline.storage.model_store import FAMILIES as MODEL_FAMILIES
from models.evaluation.candidates import (
    Candidate,
    climatology_candidate,
    lightgbm_candidate,
    trading_baselines,
)
from models.evaluation.family_candidates import forecaster_candidate
from models.evaluation.walk_forward import RowPool, WalkForwardConfig, walk_forward
from models.mamba2.model import Mamba2Config
from models.tft.model import TFTConfig
from models.training.loop import TrainConfig
from tests.walk_forward_data import generated_pool

MODEL_CONFIGS = {"tft": TFTConfig, "mamba2": Mamba2Config}
N_FAMILIES = len(MODEL_FAMILIES)  # every registered family makes skill claims on the protocol


def profile_candidate(family: str, pool: RowPool, profile: str = "demo") -> Candidate:
    """``foxhunt-<family>`` with the profile's sizes: its model fields go to the model
    config, the rest to ``TrainConfig`` (as the training asset splits them)."""
    sizes = dict(PROFILES[profile].get(f"{family}_model", {}))
    model_fields = {f.name for f in dataclasses.fields(MODEL_CONFIGS[family])}
    meta = pool.meta
    model_config = {"n_static": len(meta["static_names"]), "n_observed": len(meta["observed_names"]),
                    "n_known": len(meta["known_names"]), "lookback": int(meta["lookback"]),
                    "horizon": int(meta["horizon"]), "quantiles": list(meta["quantiles"]),
                    **{k: v for k, v in sizes.items() if k in model_fields}}
    train = TrainConfig(**{k: v for k, v in sizes.items() if k not in model_fields})
    return forecaster_candidate(f"foxhunt-{family}", family, model_config, train)


def run(pool: RowPool, families: list[str], lightgbm: bool, profile: str = "demo"):
    baselines = [*trading_baselines((1,)), climatology_candidate()]
    if lightgbm:
        baselines.append(lightgbm_candidate(seed=0, **PROFILES[profile].get("lightgbm", {})))
    wf = PROFILES[profile]["walk_forward"]
    bootstrap = int(PROFILES[profile].get("evaluation", {}).get("bootstrap", 1000))
    candidates = [profile_candidate(f, pool, profile) for f in families] + baselines
    return walk_forward(pool, candidates, WalkForwardConfig(**wf),
                        n_compared=N_FAMILIES + len(baselines), bootstrap=bootstrap)


def _fmt(v: float | None, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if v is None or not math.isfinite(v) else f"{v:{width}.{digits}f}"


def table(result) -> str:
    head = (f"{'candidate':24} {'sharpe':>8} {'sharpe_ci_low':>13} {'ic':>7} {'ic_ci_low':>9} "
            f"{'n_trades':>8}  skill")
    lines = [head, "-" * len(head)]
    for name, c in result.candidates.items():
        p = c.pooled
        skill = p["sharpe_ci_low"] > 0 and p.get("ic_ci_low", math.nan) > 0
        lines.append(f"{name:24} {_fmt(p['sharpe'], 8, 2)} {_fmt(p['sharpe_ci_low'], 13, 2)} "
                     f"{_fmt(p.get('ic'), 7, 3)} {_fmt(p.get('ic_ci_low'), 9, 3)} "
                     f"{_fmt(p['n_trades'], 8, 0)}  {'yes' if skill else 'no'}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=int, default=20)
    ap.add_argument("--roots", default="ES,ZN")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--families", default="tft,mamba2")
    ap.add_argument("--no-lightgbm", action="store_true")
    ap.add_argument("--profile", default="demo")
    args = ap.parse_args()
    torch.set_num_threads(1)  # a shared box: one thread is the fair, repeatable setting
    families = [f for f in args.families.split(",") if f]
    roots = tuple(args.roots.split(","))
    print(f"generate(days={args.days}, roots={roots}, seed={args.seed}); profile "
          f"{args.profile}: walk_forward {PROFILES[args.profile]['walk_forward']}, "
          + ", ".join(f"{f}_model {PROFILES[args.profile].get(f + '_model')}" for f in families))
    total = time.perf_counter()
    for random_walk in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            pool = generated_pool(Path(tmp), days=args.days, roots=roots, seed=args.seed,
                                  random_walk=random_walk)
            t1 = time.perf_counter()
            result = run(pool, families, not args.no_lightgbm, args.profile)
            t2 = time.perf_counter()
        first = result.candidates[next(iter(result.candidates))]
        print(f"\n== {'random walk' if random_walk else 'default (latent drift)'}: "
              f"{pool.rows.n_rows} rows, {len(result.folds)} folds, "
              f"{int(first.pooled['n_bars'])} pooled test bars, CI level "
              f"{first.pooled['ci_level']:.4f}; data {t1 - t0:.1f} s, walk-forward "
              f"{t2 - t1:.1f} s")
        for f in result.folds:
            d = f.describe()
            print(f"   fold {f.number}: train {d['train']}, validation {d['validation']}, "
                  f"test {d['test']}")
        print(table(result))
    print(f"\nwall time {time.perf_counter() - total:.1f} s")


if __name__ == "__main__":
    main()
