"""History scaling: the data path up to training_dataset as the stored history grows.

    nice python benchmarks/history_scaling.py [--days 30 120 365] [--work DIR] [--json out.json] [--skip-ingest]

For each history length: generate that many UTC days of 1-minute ES, ZN, CL, GC
(``synthetic.generate``), decode every file to raw_bars, then, each step in a fresh process
(peak RSS is the process's ``ru_maxrss``, imports included):

* ``full``: continuous_bars + features over every trade date but the last landed file's,
  then training_dataset over all of them (the partitioned path the assets take: one raw
  block per date, ``features.dataset_dates``);
* ``day``: the last file lands: continuous_bars + features for the dates it touches (plus
  the date before), then training_dataset again (only the rebuilt dates are summarised);
* ``read``: what the first reader of the new dataset pays once (``dataset_store.load``:
  split, embargo and normalisation applied, arrays written to its cache);
* ``anchor``: the unpartitioned path (one frame of the whole history: ``build_continuous``
  -> ``build_features`` -> ``build_training_dataset``, in memory), at every size.

* ``ingest``: ``foxhunt materialize raw_bars`` on a fresh home holding every landed file
  (real Dagster runs), 100 files per run; for 30 days also one run per file (the anchor).

Ratios: day / full (wall time), full / anchor (wall time, CPU time and peak), and peak RSS
of each step / the 30-day one (flatness). CPU time is user + sys of every thread of the
step's process; each step also records the 1-minute load average as it ended (``load1`` in
the JSON). On a shared machine both times swing with the load, and CPU time also grows when
cores are free (polars' workers spin), so compare builds side by side, several rounds. Targets (issues 14 and 25, 2 cores): one day after a year
<= 3 s and <= 1/10 of the full build; the full build <= 1.5x the anchor; the peak of the
full year's build <= 2 GB and within 1.5x from 30 to 365 days; a year of files ingested in
<= 40 s (``--skip-ingest`` leaves the ingest runs out).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOTS = ("ES", "ZN", "CL", "GC")
START = date(2024, 1, 2)


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_s() -> float:
    """CPU seconds (user + sys) of this process so far, every thread included: on a loaded
    machine it swings far less than wall time."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _dataset(root) -> dict:
    from foxhunt_pipeline.features import dataset_dates
    from foxhunt_pipeline.storage import dataset_store

    t0 = time.perf_counter()
    with dataset_store.updating(root):  # as the asset
        done = dataset_dates.update(root)
        dataset_dates.publish(root, done)
    rows = sum(s["rows"] for s in done.data.meta["splits"].values())
    return {"dataset_s": time.perf_counter() - t0, "rows": rows, "summarised": done.summarised}


def _read(root) -> dict:
    """The first reader of the current dataset: its arrays materialised into a cache."""
    from foxhunt_pipeline.storage import dataset_store

    cache = Path(root.path) / "_reader_cache"
    shutil.rmtree(cache, ignore_errors=True)
    t0, c0 = time.perf_counter(), _cpu_s()
    data = dataset_store.load(root, cache)
    rows = sum(s.n_rows for s in data.splits.values())
    out = {"step": "read", "total_s": time.perf_counter() - t0, "cpu_s": _cpu_s() - c0, "rows": rows,
           "peak_mb": _peak_mb()}
    shutil.rmtree(cache, ignore_errors=True)
    return out


def ingest(home: Path, batch: int) -> dict:
    """``foxhunt materialize raw_bars`` on a home whose landing zone holds every file: real
    Dagster runs on a real instance, ``batch`` files per run (1: one run per file)."""
    os.environ["FOXHUNT_HOME"] = str(home)
    from foxhunt_pipeline.cli import runner
    from foxhunt_pipeline.config.paths import FoxhuntPaths

    runner.INGEST_BATCH = batch
    paths = FoxhuntPaths.from_env(home).ensure()
    t0 = time.perf_counter()
    ok = runner.materialize_selection(paths, ["raw_bars"], profile="fast", echo=lambda _: None)
    return {"step": f"ingest_batch{batch}", "ok": ok, "total_s": time.perf_counter() - t0,
            "peak_mb": _peak_mb()}


def child(step: str, warehouse: Path, last_file: str) -> dict:
    """One measured step in this (fresh) process."""
    if step.startswith("ingest"):
        return ingest(warehouse, int(step.removeprefix("ingest")))
    from upath import UPath

    from foxhunt_pipeline.features import build_features, by_date, dataset_dates  # noqa: F401  (imports not timed)
    from foxhunt_pipeline.features.dataset import build_training_dataset  # noqa: F401
    from foxhunt_pipeline.storage import continuous_dates

    root = UPath(warehouse)
    if step == "read":
        return _read(root)
    out: dict = {"step": step}
    t0, c0 = time.perf_counter(), _cpu_s()
    if step == "full":
        days = continuous_dates.all_dates(root)
        continuous_dates.build_dates(root, days)
        out["continuous_s"] = time.perf_counter() - t0
        by_date.build_dates(root, days[0], days[-1])
        out["dates"] = len(days)
    elif step == "day":
        days = continuous_dates.touched_dates(root, [last_file])
        lo, _ = continuous_dates.rebuild_span(root, days)
        continuous_dates.build_dates(root, days)
        out["continuous_s"] = time.perf_counter() - t0
        by_date.build_dates(root, date.fromisoformat(lo), days[-1])
        out["dates"] = len(days)
    elif step == "anchor":
        from foxhunt_pipeline.features import build_features
        from foxhunt_pipeline.features.dataset import build_training_dataset
        from foxhunt_pipeline.instruments.rolls import build_continuous
        from foxhunt_pipeline.storage.object_store import scan_raw_bars

        cont, _ = build_continuous(scan_raw_bars(root))
        feats = build_features(cont)
        build_training_dataset(feats, close_prices=cont.select("ts_event", "root", "close"))
        out["rows"] = feats.height
        out["total_s"] = time.perf_counter() - t0
        out["cpu_s"] = _cpu_s() - c0
        out["peak_mb"] = _peak_mb()
        return out
    out["features_s"] = time.perf_counter() - t0 - out["continuous_s"]
    out["data_peak_mb"] = _peak_mb()  # continuous_bars + features alone
    out["data_cpu_s"] = _cpu_s() - c0
    out.update(_dataset(root))
    out["total_s"] = time.perf_counter() - t0
    out["cpu_s"] = _cpu_s() - c0
    out["peak_mb"] = _peak_mb()
    return out


def _run_child(step: str, warehouse: Path, last_file: str) -> dict:
    cmd = [sys.executable, __file__, "--child", step, "--warehouse", str(warehouse), "--last", last_file]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out["load1"] = os.getloadavg()[0]  # the 1-minute load average as the step ended
    return out


def prepare(days: int, work: Path) -> tuple[Path, Path, str, float]:
    """(raw-only warehouse without the last file, the last file's raw partition, its key,
    seconds to decode every file)."""
    from foxhunt_pipeline.ingest.decode import ingest_dbn_file
    from foxhunt_pipeline.storage.warehouse import raw_bars_partition_path
    from foxhunt_pipeline.synthetic.generate import generate

    base = work / f"{days}d"
    files = sorted(generate(base / "landing", days=days, roots=ROOTS, start=START, seed=11))
    raw = base / "raw"
    t0 = time.perf_counter()
    for f in files:
        dest = raw_bars_partition_path(raw, f.name)
        if not dest.is_file():
            ingest_dbn_file(f, dest, source_file=f.name)
    ingest_s = time.perf_counter() - t0
    return raw, raw_bars_partition_path(raw, files[-1].name), files[-1].name, ingest_s


def bench(days: int, work: Path, per_file_up_to: int = 30, skip_ingest: bool = False) -> dict:
    from foxhunt_pipeline.storage.warehouse import raw_bars_partition_path

    raw, last_part, last_name, ingest_s = prepare(days, work)
    wh = work / f"{days}d" / "warehouse"
    shutil.rmtree(wh, ignore_errors=True)
    shutil.copytree(raw, wh)
    held = raw_bars_partition_path(wh, last_name)
    shutil.rmtree(held.parent)  # the last file has not landed yet
    full = _run_child("full", wh, last_name)
    held.parent.mkdir(parents=True)
    shutil.copyfile(last_part, held)
    day = _run_child("day", wh, last_name)
    read = _run_child("read", wh, last_name)
    anchor = _run_child("anchor", wh, last_name)
    out = {"days": days, "files": len(list((raw / "raw_bars").iterdir())), "ingest_s": ingest_s,
           "full": full, "day": day, "read": read, "anchor": anchor}
    for batch in () if skip_ingest else (100, 1) if days <= per_file_up_to else (100,):
        home = work / f"{days}d" / f"home-batch{batch}"
        shutil.rmtree(home, ignore_errors=True)
        shutil.copytree(work / f"{days}d" / "landing", home / "landing")
        out[f"ingest_batch{batch}"] = _run_child(f"ingest{batch}", home, "")
        shutil.rmtree(home, ignore_errors=True)
    return out


def report(rows: list[dict]) -> str:
    base, nan = rows[0], float("nan")
    lines = [
        "| days | files | rows | step | continuous s | features s | dataset s | total s | CPU s | "
        "peak RSS MB (continuous+features) | peak RSS MB (with dataset) |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        for step in ("full", "day", "read", "anchor"):
            s = r[step]
            lines.append(
                f"| {r['days']} | {r['files']} | {s.get('rows', '')} | {step} | "
                f"{s.get('continuous_s', float('nan')):.2f} | {s.get('features_s', float('nan')):.2f} | "
                f"{s.get('dataset_s', float('nan')):.2f} | {s['total_s']:.2f} | "
                f"{s.get('cpu_s', float('nan')):.2f} | "
                f"{s.get('data_peak_mb', float('nan')):.0f} | {s['peak_mb']:.0f} |")
    lines += ["", "| days | day total s | day / full (time) | day: cont+features s | full / anchor (time) | "
              "full / anchor (CPU) | full peak / 30-day full peak | full peak / anchor peak | read / anchor (time) | "
              "decode all files s |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        cf = r["day"]["continuous_s"] + r["day"]["features_s"]
        lines.append(
            f"| {r['days']} | {r['day']['total_s']:.2f} | {r['day']['total_s'] / r['full']['total_s']:.3f} | {cf:.2f} | "
            f"{r['full']['total_s'] / r['anchor']['total_s']:.2f} | "
            f"{r['full'].get('cpu_s', nan) / r['anchor'].get('cpu_s', nan):.2f} | "
            f"{r['full']['peak_mb'] / base['full']['peak_mb']:.2f} | "
            f"{r['full']['peak_mb'] / r['anchor']['peak_mb']:.2f} | "
            f"{r['read']['total_s'] / r['anchor']['total_s']:.2f} | {r['ingest_s']:.1f} |")
    if not any("ingest_batch100" in r for r in rows):
        return "\n".join(lines)
    lines += ["", "| days | files | decode floor s (ingest_dbn_file, no Dagster) | foxhunt materialize raw_bars, "
              "100 files per run s | one run per file s | per-file / batched |", "|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        b = r.get("ingest_batch100", {}).get("total_s", float("nan"))
        one = r.get("ingest_batch1", {}).get("total_s", float("nan"))
        lines.append(f"| {r['days']} | {r['files']} | {r['ingest_s']:.1f} | {b:.1f} | {one:.1f} | {one / b:.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=int, nargs="+", default=[30, 120, 365])
    ap.add_argument("--work", type=Path, default=Path("/tmp/foxhunt-history-bench"))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--child", default=None)
    ap.add_argument("--warehouse", type=Path, default=None)
    ap.add_argument("--last", default="")
    ap.add_argument("--skip-ingest", action="store_true", help="leave out the Dagster ingest runs")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.warehouse, args.last), default=str))
        return
    rows = []
    for d in args.days:
        rows.append(bench(d, args.work, skip_ingest=args.skip_ingest))
        print(report(rows), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=str))


if __name__ == "__main__":
    main()
