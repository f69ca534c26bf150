"""Feature library and training-dataset benchmark: the default feature set on N and
ratio x N generated minute bars (the N run is the anchor), each size in its own subprocess
so its peak RSS is its own.

    nice python benchmarks/features.py [--rows 1000000] [--ratio 4] [--roots ES,ZN]

Reports, per size: build seconds (generation excluded), rows/s, peak RSS, output size; the
large/small time ratio (target <= 1.1 x ratio, i.e. 4.4 for 4x: linear); and for the small
size the training dataset's bytes against the bytes of the windows it represents (it must
store the row matrix, not the windows).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from datetime import date, timedelta

import numpy as np
import polars as pl


def generate_bars(
    rows: int, roots: list[str], seed: int = 0, missing: float = 0.05
) -> pl.DataFrame:
    """continuous_bars-shaped minute bars: full CME sessions on weekdays, ``missing`` of the
    minutes without a trade, a roll every 60 trade days."""
    from foxhunt_pipeline.instruments.specs import ROOTS

    rng = np.random.default_rng(seed)
    per_root = rows // len(roots)
    per_session = 1380
    sessions = int(np.ceil(per_root / (per_session * (1 - missing)))) + 1
    days, d = [], date(2020, 1, 6)
    while len(days) < sessions:
        if d.weekday() < 5:
            days.append(d)
        d += timedelta(days=1)
    # 17:00 CT opens as UTC: 23:00 UTC in winter, 22:00 in summer (approximate DST by month)
    opens = np.array(
        [
            np.datetime64(day)
            - np.timedelta64(1, "D")
            + np.timedelta64(22 if 4 <= day.month <= 10 else 23, "h")
            for day in days
        ],
        dtype="datetime64[ns]",
    )
    ts = (opens[:, None] + np.arange(per_session)[None, :] * np.timedelta64(60, "s")).ravel()
    day_idx = np.repeat(np.arange(len(days)), per_session)
    frames = []
    for root in roots:
        sp = ROOTS[root]
        keep = rng.random(ts.size) >= missing
        t, di = ts[keep][:per_root], day_idx[keep][:per_root]
        n = t.size
        sigma = sp.daily_vol / np.sqrt(per_session)
        close = sp.price_level * np.exp(np.cumsum(rng.standard_normal(n) * sigma))
        close = np.maximum(np.round(close / sp.tick_size), 1) * sp.tick_size
        open_ = np.concatenate([[close[0]], close[:-1]])
        wick = (
            np.round(np.abs(rng.standard_normal(n)) * sigma * sp.price_level / sp.tick_size)
            * sp.tick_size
        )
        seq = (di // 60).astype(np.int32)
        expiry = np.array(
            [np.datetime64(days[min(len(days) - 1, (s + 1) * 60)]) for s in range(seq.max() + 1)]
        )
        frames.append(
            pl.DataFrame(
                {
                    "ts_event": pl.Series(t).dt.replace_time_zone("UTC"),
                    "rtype": pl.Series(np.full(n, 33), dtype=pl.UInt8),
                    "publisher_id": pl.Series(np.ones(n), dtype=pl.UInt16),
                    "instrument_id": pl.Series(
                        seq.astype(np.int64) + 100 * sp.root_id, dtype=pl.UInt32
                    ),
                    "symbol": pl.Series(seq).cast(pl.String),
                    "root": pl.Series([root]).extend_constant(root, n - 1),
                    "open": open_,
                    "high": np.maximum(open_, close) + wick,
                    "low": np.minimum(open_, close) - wick,
                    "close": close,
                    "volume": pl.Series(rng.integers(1, 2000, n), dtype=pl.UInt64),
                    "contract_seq": pl.Series(seq, dtype=pl.Int32),
                    "expiry": pl.Series(expiry[seq]).cast(pl.Date),
                }
            ).with_columns(symbol=pl.lit(root) + pl.col("symbol"))
        )
    return pl.concat(frames)


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _cpu_s() -> float:
    """CPU time of all this process's threads: less sensitive than wall time to other jobs
    on a shared machine."""
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def child(rows: int, roots: list[str], dataset: bool) -> dict:
    from foxhunt_pipeline.features import build_features
    from foxhunt_pipeline.features.dataset import build_training_dataset

    bars = generate_bars(rows, roots)
    build_features(bars.head(5000))  # warm imports and the exchange calendars
    rss_before = _peak_rss_mb()
    cpu0, t0 = _cpu_s(), time.perf_counter()
    feats = build_features(bars)
    secs, cpu = time.perf_counter() - t0, _cpu_s() - cpu0
    out = {
        "rows_in": bars.height,
        "rows_out": feats.height,
        "columns": feats.width,
        "seconds": secs,
        "cpu_seconds": cpu,
        "rows_per_s": bars.height / secs,
        "peak_rss_mb": _peak_rss_mb(),
        "rss_before_build_mb": rss_before,
        "features_mb": feats.estimated_size() / 2**20,
    }
    if dataset:
        del bars
        t0 = time.perf_counter()
        td = build_training_dataset(feats)
        out["dataset_seconds"] = time.perf_counter() - t0
        stored = sum(s.nbytes() for s in td.splits.values())
        t, h = td.lookback, td.horizon
        f, k, s = len(td.observed_names), len(td.known_names), len(td.static_names)
        per_window = 4 * (t * f + (t + h) * k + s + h)
        windows = sum(sp.n_windows for sp in td.splits.values())
        out |= {
            "dataset_stored_mb": stored / 2**20,
            "dataset_windows": windows,
            "windows_as_copies_mb": windows * per_window / 2**20,
            "copies_over_stored": windows * per_window / stored,
            "peak_rss_after_dataset_mb": _peak_rss_mb(),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--ratio", type=int, default=4)
    ap.add_argument("--roots", default="ES,ZN")
    ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--dataset", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    roots = a.roots.split(",")
    if a.child:
        print(json.dumps(child(a.child, roots, a.dataset)))
        return
    results = {}
    for label, n, ds in (("anchor", a.rows, True), ("large", a.rows * a.ratio, False)):
        cmd = [sys.executable, __file__, "--child", str(n), "--roots", a.roots] + (
            ["--dataset"] if ds else []
        )
        proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
        if proc.returncode:
            sys.exit(f"{label} run failed:\n{proc.stderr[-3000:]}")
        results[label] = json.loads(proc.stdout.strip().splitlines()[-1])
        r = results[label]
        print(
            f"{label:>6}: {r['rows_in']:>9,} bars -> {r['rows_out']:,} x {r['columns']} in {r['seconds']:.1f} s "
            f"({r['rows_per_s']:,.0f} rows/s, cpu {r['cpu_seconds']:.1f} s), peak RSS {r['peak_rss_mb']:,.0f} MB, table {r['features_mb']:,.0f} MB"
        )
    ratio = results["large"]["seconds"] / results["anchor"]["seconds"]
    cpu_ratio = results["large"]["cpu_seconds"] / results["anchor"]["cpu_seconds"]
    target = 1.1 * a.ratio
    for name, v in (("wall", ratio), ("cpu", cpu_ratio)):
        verdict = "ok" if v <= target else "MISSED"
        print(f"{name} time ratio {a.ratio}x rows: {v:.2f} (target <= {target:.1f}: {verdict})")
    r = results["anchor"]
    print(
        f"training_dataset: {r['dataset_stored_mb']:,.0f} MB stored for {r['dataset_windows']:,} windows that as copies "
        f"would take {r['windows_as_copies_mb']:,.0f} MB ({r['copies_over_stored']:.0f}x), built in {r['dataset_seconds']:.1f} s"
    )
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
