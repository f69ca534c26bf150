"""Sparse history: ``foxhunt materialize`` on files that span years with few dates of data.

    nice python benchmarks/sparse_history.py [--years 0 2 6] [--days 3] [--work DIR] [--json out.json]

For each gap length G (years): generate ``--days`` UTC days of 1-minute ES from 2013-10-07
and the same number from 2013-10-07 + G years (``synthetic.generate``), land them in a fresh
home and run ``foxhunt materialize raw_bars continuous_bars features`` (real Dagster runs on
the home's persistent instance, in a fresh process). Reports the wall time of the whole
command and of its continuous_bars / features runs, and how many trade-date partitions the
runs covered. G = 0 is the same number of dates without a gap: the reference. Target
(issue 24): the trade-date runs take about as long whatever G, i.e. time proportional to the
dates with data, not to the calendar they span.

Measured (2 shared CPU cores, ``--years 0 6 --days 2``: 4 landed files of ES either way):

| gap | before (one run over every weekday partition) | after (one run per cluster of dates) |
|---|---|---|
| none | 11-16 s total, trade-date run 1.9-4.1 s, 5 partitions | 16-18 s total, 4.1 s, 5 partitions |
| 6 years | 357.6 s total, trade-date run 340.2 s, 1,568 partitions | 18.0 s total, 2 runs 6.6 s, 6 partitions |

(the spread of the no-gap row is the load of the shared machine: the two versions measured
back to back gave 16.4 s and 16.1 s.)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

START = date(2013, 10, 7)
LINE = re.compile(r"\[(ok|FAILED)\] (?P<label>.+?) in (?P<s>[\d.]+)s")


def _land(landing: Path, days: int, gap_years: int) -> int:
    from foxhunt_pipeline.synthetic.generate import generate

    starts = [START] if gap_years == 0 else [START, START.replace(year=START.year + gap_years)]
    n = 2 * days if gap_years == 0 else days
    files = [f for s in starts for f in generate(landing, days=n, roots=("ES",), start=s, seed=11)]
    return len(files)


def run(gap_years: int, days: int, work: Path) -> dict:
    home = work / f"gap{gap_years}"
    shutil.rmtree(home, ignore_errors=True)
    (home / "landing").mkdir(parents=True)
    files = _land(home / "landing", days, gap_years)
    env = {**os.environ, "FOXHUNT_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}
    cmd = [sys.executable, "-m", "foxhunt_pipeline.cli.commands", "materialize", "--profile", "fast",
           "raw_bars", "continuous_bars", "features"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    dated = [m for m in LINE.finditer(out.stdout) if "continuous_bars" in m["label"]]
    spans = re.findall(r"\[(\d{4}-\d\d-\d\d) \.\. (\d{4}-\d\d-\d\d)\]", out.stdout)
    partitions = sum(_weekdays(date.fromisoformat(a), date.fromisoformat(b)) for a, b in spans)
    return {"gap_years": gap_years, "files": files, "wall_s": round(wall, 1),
            "dated_runs": len(dated), "dated_runs_s": round(sum(float(m["s"]) for m in dated), 1),
            "partitions": partitions, "ok": out.returncode == 0,
            "tail": out.stdout.strip().splitlines()[-12:]}


def _weekdays(a: date, b: date) -> int:
    return sum(1 for i in range((b - a).days + 1) if date.fromordinal(a.toordinal() + i).weekday() < 5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--years", type=int, nargs="+", default=[0, 2, 6])
    parser.add_argument("--days", type=int, default=3, help="UTC days landed on each side of the gap")
    parser.add_argument("--work", type=Path, default=Path("/tmp/foxhunt-sparse-history"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    results = []
    for g in args.years:
        r = run(g, args.days, args.work)
        results.append(r)
        print(f"gap {g} years: {r['files']} files, materialize {r['wall_s']}s "
              f"(trade-date runs: {r['dated_runs']} run(s), {r['dated_runs_s']}s, "
              f"{r['partitions']} partitions), ok={r['ok']}", flush=True)
        if not r["ok"]:
            print("\n".join(r["tail"]))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
