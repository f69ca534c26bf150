"""Agent benchmarks: env throughput, policy latency vs the old system, demo training time.

    nice python benchmarks/agents.py [--quick] [--json out.json]

Anchors (LEGACY.md): the old system's batch-1 inference P95 was 2.1 ms (DQN) and 3.2 ms (PPO).
Ratios below are ours / old (< 1 is faster). Data: ``synthetic_training_data()`` in the real
format (lookback 60, 12 observed + 10 known channels, obs_dim 1323).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.vec_env import DummyVecEnv

from models.agents.trading_env import (
    TradingEnv,
    evaluate_positions,
    prepare_market_data,
    summarize_backtest,
)
from models.agents.train import (
    DQNConfig,
    PPOConfig,
    make_dqn,
    make_ppo,
    policy_net_from_model,
    train_dqn,
    train_ppo,
)
from tests.model_data import synthetic_training_data

OLD_P95_MS = {"dqn": 2.1, "ppo": 3.2}


def env_steps_per_second(market, n_steps: int, n_envs: int = 1) -> float:
    rng = np.random.default_rng(0)
    if n_envs == 1:
        env = TradingEnv(market)
        env.reset(seed=0)
        t0 = time.perf_counter()
        for a in rng.integers(0, 3, n_steps):
            *_, trunc, _ = env.step(int(a))
            if trunc:
                env.reset()
        return n_steps / (time.perf_counter() - t0)
    venv = DummyVecEnv([lambda: TradingEnv(market) for _ in range(n_envs)])
    venv.seed(0)
    venv.reset()
    rounds = max(1, n_steps // n_envs)
    t0 = time.perf_counter()
    for _ in range(rounds):
        venv.step(rng.integers(0, 3, n_envs))
    return rounds * n_envs / (time.perf_counter() - t0)


def latency_ms(fn, x, iters: int, sync: bool) -> tuple[float, float]:
    for _ in range(max(20, iters // 10)):
        fn(x)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn(x)
        if sync:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times)), float(np.percentile(times, 95))


def vec_env_scaling(data, quick: bool) -> dict[str, Any]:
    """PPO training steps/s with n_envs copies stepped in-process (anchor) or one process
    each; interleaved, one torch thread per process."""
    print("\nPPO rollouts: subproc vs dummy (same seed, same updates)")
    out: dict[str, Any] = {}
    steps = 4_096 if quick else 16_384
    for n in (2, 4):
        rates = {}
        for kind in ("dummy", "subproc"):
            cfg = PPOConfig.demo()
            cfg.total_timesteps, cfg.n_envs, cfg.n_steps, cfg.eval_freq = steps, n, 512, 0
            cfg.device, cfg.vec_env = "cpu", kind
            rates[kind] = steps / train_ppo(data, cfg).train_seconds
        out[f"n_envs_{n}"] = {**rates, "ratio": rates["subproc"] / rates["dummy"]}
        print(f"n_envs {n}: dummy {rates['dummy']:,.0f} steps/s, subproc {rates['subproc']:,.0f} "
              f"steps/s, ratio {rates['subproc'] / rates['dummy']:.2f}")
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer steps, demo training at 1/4 length")
    p.add_argument("--skip-training", action="store_true")
    p.add_argument("--json", help="also write the figures here")
    p.add_argument("--vec-env", action="store_true",
                   help="PPO rollouts in worker processes (subproc) against in-process (dummy)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    data = synthetic_training_data()
    market = prepare_market_data(data, "train")
    steps = 5_000 if args.quick else 20_000
    out: dict[str, Any] = {"obs_dim": market.obs_dim, "torch_threads": 1}

    print(f"obs_dim {market.obs_dim} (lookback {market.lookback} x {market.n_channels} + 3)")
    out["env_steps_per_s"] = {"single": env_steps_per_second(market, steps)}
    for n in (4, 8):
        out["env_steps_per_s"][f"dummy_vec_{n}"] = env_steps_per_second(market, steps, n)
    for k, v in out["env_steps_per_s"].items():
        print(f"env steps/s  {k:<12} {v:>10,.0f}")

    iters = 500 if args.quick else 2000
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    out["latency_ms"] = {}
    print(f"\n{'policy':<28}{'median ms':>10}{'P95 ms':>9}{'old P95':>9}{'ratio':>8}")
    for algo, make, cfg in (("dqn", make_dqn, DQNConfig()), ("ppo", make_ppo, PPOConfig())):
        model = make(data, cfg)
        obs = market.observations(market.rows[:1], 0)
        rows = {"sb3_predict_cpu": (lambda o, m=model: m.predict(o, deterministic=True), obs, False)}
        for dev in devices:
            net = policy_net_from_model(model).to(dev)
            x = torch.from_numpy(obs).to(dev)
            rows[f"policynet_act_{dev}"] = (net.act, x, dev == "cuda")
        for name, (fn, x, sync) in rows.items():
            med, p95 = latency_ms(fn, x, iters, sync)
            out["latency_ms"][f"{algo}/{name}"] = {"median": med, "p95": p95, "ratio_p95": p95 / OLD_P95_MS[algo]}
            print(f"{algo + '/' + name:<28}{med:>10.3f}{p95:>9.3f}{OLD_P95_MS[algo]:>9.1f}{p95 / OLD_P95_MS[algo]:>8.3f}")
        # batched backtest throughput (3 forwards per row, any batch size)
        net = policy_net_from_model(model)
        t0 = time.perf_counter()
        bt = evaluate_positions(net, data, "validation")
        dt = time.perf_counter() - t0
        out[f"{algo}_backtest_rows_per_s"] = bt["rows"].size / dt
        print(f"{algo} evaluate_positions: {bt['rows'].size / dt:,.0f} rows/s")

    if args.vec_env:
        out["vec_env"] = vec_env_scaling(data, quick=args.quick)

    if not args.skip_training:
        print("\ndemo training (synthetic data, signal 0.5, one CPU thread)")
        follow = summarize_backtest(
            evaluate_positions(lambda o: np.where(o[:, 59 * 22] > 0, 2, 0), data, "validation")
        )["mean_reward"]
        out["validation_follow_f0_mean_reward"] = follow
        for algo, train, cfg in (("dqn", train_dqn, DQNConfig.demo()), ("ppo", train_ppo, PPOConfig.demo())):
            if args.quick:
                cfg.total_timesteps //= 4
                cfg.eval_freq = cfg.total_timesteps // 2
            cfg.device = "cpu"
            r = train(data, cfg)
            out[f"{algo}_demo"] = {
                "total_timesteps": cfg.total_timesteps,
                "train_seconds": r.train_seconds,
                "steps_per_s": cfg.total_timesteps / r.train_seconds,
                "val_mean_reward": r.final_val_mean_reward,
                "val_sharpe_per_bar": r.final_validation["sharpe_per_bar"],
            }
            print(f"{algo}: {cfg.total_timesteps} steps in {r.train_seconds:.1f} s "
                  f"({cfg.total_timesteps / r.train_seconds:,.0f} steps/s); validation mean reward "
                  f"{r.final_val_mean_reward:.2e} (flat 0, follow-f_0 {follow:.2e})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return out


if __name__ == "__main__":
    main()
