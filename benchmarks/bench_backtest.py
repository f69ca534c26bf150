"""Vectorised backtest vs the bar-by-bar loop it must equal (the anchor), side by side.

    nice python benchmarks/bench_backtest.py [n_bars]

Prints both timings, the speed ratio and the largest pnl difference; then the Sharpe
block bootstrap (1000 resamples) from block sums against the generic resample-everything
bootstrap (the anchor), with their largest CI-bound difference.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from models.evaluation.backtest import run_backtest
from models.evaluation.metrics import block_bootstrap_ci, sharpe_ci


def loop_backtest(pos: np.ndarray, r: np.ndarray, c: np.ndarray, seg: np.ndarray) -> np.ndarray:
    pnl = np.empty(len(r))
    held = 0.0
    for t in range(len(r)):
        if t > 0 and seg[t] != seg[t - 1]:
            held = 0.0
        ok = np.isfinite(r[t])
        p = pos[t] if ok else 0.0
        x = p * (r[t] if ok else 0.0) - c[t] * abs(p - held)
        if t + 1 < len(r) and seg[t + 1] != seg[t]:
            x -= c[t] * abs(p)
        pnl[t] = x
        held = p
    return pnl


def main(n: int = 200_000) -> None:
    rng = np.random.default_rng(0)
    r = rng.normal(0, 1e-3, n)
    pos = rng.choice([-1.0, 0.0, 1.0], size=n)
    c = np.full(n, 2e-5)
    seg = np.arange(n) // 20_000
    t0 = time.perf_counter()
    ref = loop_backtest(pos, r, c, seg)
    t_loop = time.perf_counter() - t0
    t0 = time.perf_counter()
    bt = run_backtest(pos, r, c, seg, 252 * 1380)
    t_vec = time.perf_counter() - t0
    print(f"backtest  bars={n}  loop={t_loop * 1e3:.1f} ms  vectorised={t_vec * 1e3:.1f} ms  "
          f"ratio={t_loop / t_vec:.1f}x  max|diff|={np.abs(bt.pnl - ref).max():.2e}")
    bpy = 252 * 1380
    t0 = time.perf_counter()
    fast = sharpe_ci(bt.pnl, bpy, n_resamples=1000, seed=0)
    t_fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    slow = block_bootstrap_ci(
        bt.pnl, lambda a: a.mean(axis=1) / a.std(axis=1, ddof=1) * np.sqrt(bpy),
        n_resamples=1000, seed=0)
    t_slow = time.perf_counter() - t0
    diff = max(abs(fast.low - slow.low), abs(fast.high - slow.high))
    print(f"sharpe_ci 1000 resamples  generic={t_slow * 1e3:.0f} ms  block-sums="
          f"{t_fast * 1e3:.0f} ms  ratio={t_slow / t_fast:.1f}x  max|bound diff|={diff:.2e}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
