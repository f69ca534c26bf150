"""Whole-graph scaling: what each asset costs as the history grows, at a fixed profile.

    python benchmarks/pipeline_scaling.py [--days 15 84 350] [--roots ES,ZN] [--seed 7]
        [--profile demo] [--work DIR] [--json out.json] [--reuse out.12.json ...] [--data-only]

For each history (UTC calendar days of generated bars: 15, 84 and 350 hold 12, 60 and
250 CME trade dates), a fresh ``FOXHUNT_HOME``: ``foxhunt generate``, then every asset of
the graph but the tuning studies, one ``foxhunt materialize <asset>`` process per asset in
dependency order (the data path up to ``training_dataset`` as one step), each timed (wall)
and measured (peak RSS of the process, ``/usr/bin/time``); last, the daily increment: the
next day landed (the generator is prefix-stable, so ``generate --days N+1`` and its last
file) and the data path run again, as the landing sensor's day does. Prints a table of
seconds and peak MB per asset and size, the totals, and each size's ratio to the first
(the target of issue 41 on 2 cores: the graph at 250 trade days at most 2x the graph at 12
in time, no asset above 3x, peak memory at most 1.5x). No timing is asserted anywhere: run
it on a quiet machine and compare sizes side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA_PATH = ("raw_bars", "continuous_bars", "features", "training_dataset")
#: the graph after the data path, in an order that respects its dependencies
MODEL_STEPS = ("tft_model", "mamba2_model", "lightgbm_model", "ensemble_model", "dqn_agent",
               "ppo_agent", "tft_evaluation", "mamba2_evaluation", "lightgbm_evaluation",
               "ensemble_evaluation", "dqn_evaluation", "ppo_evaluation", "tft_quantized",
               "mamba2_quantized", "ensemble_quantized", "dqn_quantized", "ppo_quantized",
               "model_leaderboard")
FOXHUNT = str(Path(sys.executable).with_name("foxhunt"))


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """``(wall seconds, peak RSS MB, output tail)`` of one command under ``/usr/bin/time``."""
    t0 = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "PEAK_KB %M", *cmd], env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    peak = re.findall(r"PEAK_KB (\d+)", proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n"
                           f"{(proc.stdout + proc.stderr)[-3000:]}")
    return wall, int(peak[-1]) / 1024 if peak else float("nan"), proc.stdout[-500:]


NEXT_DAY = "next day: data path"


def one_size(days: int, roots: str, seed: int, profile: str, work: Path,
             data_only: bool = False) -> dict:
    home = work / f"home-{days}"
    shutil.rmtree(home, ignore_errors=True)
    env = {**os.environ, "FOXHUNT_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"),
           "FOXHUNT_PROFILE": profile}
    subprocess.run([FOXHUNT, "generate", "--days", str(days), "--roots", roots, "--seed",
                    str(seed)], env=env, check=True, capture_output=True)
    steps: dict[str, dict[str, float]] = {}
    wall, peak, _ = timed([FOXHUNT, "materialize", *DATA_PATH], env)
    steps["data path"] = {"seconds": wall, "peak_mb": peak}
    print(f"  {days} days: data path {wall:.1f} s, {peak:.0f} MB", flush=True)
    for asset in () if data_only else MODEL_STEPS:
        wall, peak, _ = timed([FOXHUNT, "materialize", asset], env)
        steps[asset] = {"seconds": wall, "peak_mb": peak}
        print(f"  {days} days: {asset} {wall:.1f} s, {peak:.0f} MB", flush=True)
    dates = trade_dates(env)
    land_next_day(days, roots, seed, home, env)
    wall, peak, _ = timed([FOXHUNT, "materialize", *DATA_PATH], env)
    steps[NEXT_DAY] = {"seconds": wall, "peak_mb": peak}
    print(f"  {days} days: {NEXT_DAY} {wall:.1f} s, {peak:.0f} MB", flush=True)
    return {"days": days, "trade_dates": dates, "steps": steps}


def land_next_day(days: int, roots: str, seed: int, home: Path, env: dict[str, str]) -> None:
    """The next day with a session, landed as its file would be: ``generate --days days+k``
    into a scratch folder reproduces the first files byte for byte, and its new file is
    copied into the landing zone (k > 1 when the day after is a Saturday: no file)."""
    landing = home / "landing"
    for more in range(1, 4):
        with tempfile.TemporaryDirectory() as scratch:
            subprocess.run([FOXHUNT, "generate", "--days", str(days + more), "--roots", roots,
                            "--seed", str(seed), "--out", scratch], env=env, check=True,
                           capture_output=True)
            new = sorted(set(os.listdir(scratch)) - set(os.listdir(landing)))
            for name in new:
                shutil.copy(Path(scratch) / name, landing / name)
        if new:
            return
    raise RuntimeError(f"no session in the 3 days after {days} generated days")


def trade_dates(env: dict[str, str]) -> int:
    out = subprocess.run([FOXHUNT, "sql", "select count(distinct trade_date) from features"],
                         env=env, capture_output=True, text=True).stdout
    numbers = re.findall(r"\b(\d+)\b", out)
    return int(numbers[-1]) if numbers else -1


def report(sizes: list[dict]) -> str:
    """Sizes side by side, smallest first; ratios are to the smallest. The totals are the
    graph's (the next day is its own line, the cost of a day in daily use)."""
    sizes = sorted(sizes, key=lambda s: s["days"])
    names = sorted(dict.fromkeys(n for s in sizes for n in s["steps"]), key=lambda n: n == NEXT_DAY)
    head = f"{'asset':22}" + "".join(f"{str(s['days']) + ' d s':>10}{'MB':>8}" for s in sizes)
    head += "".join(f"{'x' + str(s['days']):>9}" for s in sizes[1:])
    lines = [head, "-" * len(head)]
    for n in names:
        steps = [s["steps"].get(n) for s in sizes]
        cells = "".join(f"{st['seconds']:10.1f}{st['peak_mb']:8.0f}" if st else f"{'-':>10}{'-':>8}"
                        for st in steps)
        cells += "".join(f"{st['seconds'] / steps[0]['seconds']:9.2f}" if st and steps[0]
                         else f"{'-':>9}" for st in steps[1:])
        lines.append(f"{n[:22]:22}{cells}")
    graph = [{k: v for k, v in s["steps"].items() if k != NEXT_DAY} for s in sizes]
    totals = [sum(v["seconds"] for v in g.values()) for g in graph]
    peaks = [max(v["peak_mb"] for v in g.values()) for g in graph]
    lines.append(f"{'total (s) / peak (MB)':22}" + "".join(f"{t:10.1f}{p:8.0f}"
                                                            for t, p in zip(totals, peaks,
                                                                            strict=True))
                 + "".join(f"{t / totals[0]:9.2f}" for t in totals[1:]))
    lines.append("trade dates: " + ", ".join(f"{s['days']} d -> {s['trade_dates']}"
                                            for s in sizes))
    lines.append("peak ratio to the first size: " + ", ".join(
        f"{s['days']} d {p / peaks[0]:.2f}x" for s, p in zip(sizes, peaks, strict=True)))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=int, nargs="+", default=[15, 84, 350])
    ap.add_argument("--roots", default="ES,ZN")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--profile", default="demo")
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--data-only", action="store_true",
                    help="the data path and the next day only, no model step")
    ap.add_argument("--reuse", type=Path, nargs="*", default=[],
                    help="sizes measured before (the per-size JSON files --json writes), "
                         "reported beside these")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="pipeline-scaling-"))
    sizes = [json.loads(p.read_text()) for p in args.reuse]
    for days in args.days:
        print(f"== {days} calendar days of {args.roots}, profile {args.profile}", flush=True)
        sizes.append(one_size(days, args.roots, args.seed, args.profile, work,
                              args.data_only))
        if args.json:  # each size as it ends: a long run stopped later keeps what it measured
            args.json.with_suffix(f".{days}.json").write_text(json.dumps(sizes[-1], indent=2))
    text = report(sizes)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(sorted(sizes, key=lambda s: s["days"]), indent=2))


if __name__ == "__main__":
    main()
