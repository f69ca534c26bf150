"""Checkpoint save / load time and size against the old system's reports (LEGACY.md:
12 ms / 26 ms at hidden 64, 1.05 MB; 185 ms / 351 ms at hidden 256, 105 MB)."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from models.tft.model import TemporalFusionTransformer, TFTConfig
from models.training.checkpoint import load_checkpoint, save_checkpoint

LEGACY_MS = {64: (12.0, 26.0), 256: (185.0, 351.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"{'hidden':>6} {'size MB':>8} {'save ms':>8} {'load ms':>8} {'old save':>9} {'old load':>9} "
          f"{'save ratio':>10} {'load ratio':>10}")
    for hidden in (64, 256):
        cfg = TFTConfig(n_static=5, n_observed=241, n_known=10, hidden=hidden, heads=4, lstm_layers=2)
        model = TemporalFusionTransformer(cfg)
        with tempfile.TemporaryDirectory() as d:
            saves, loads = [], []
            for i in range(args.repeats):
                t0 = time.perf_counter()
                path = save_checkpoint(Path(d) / f"c{i}", model, model_type="tft", config=cfg.to_dict())
                saves.append((time.perf_counter() - t0) * 1e3)
                t0 = time.perf_counter()
                load_checkpoint(path)
                loads.append((time.perf_counter() - t0) * 1e3)
            size = path.stat().st_size / 1e6
        s, ld = statistics.median(saves), statistics.median(loads)
        old_s, old_l = LEGACY_MS[hidden]
        print(f"{hidden:>6} {size:>8.2f} {s:>8.1f} {ld:>8.1f} {old_s:>9.0f} {old_l:>9.0f} "
              f"{old_s / s:>9.1f}x {old_l / ld:>9.1f}x")


if __name__ == "__main__":
    main()
