"""Generator sidecars without generating: an empty stand-in DBN file per UTC day and its
``.generator.json`` with chosen oracle figures, so tests of the oracle row stay instant."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from pathlib import Path

from foxhunt_pipeline.synthetic.generate import dbn_file_name
from foxhunt_pipeline.synthetic.run_metadata import generator_config, write_sidecar
from foxhunt_pipeline.synthetic.signal import OracleDay


def oracle_day(k: int) -> OracleDay:
    """Day ``k``'s figures: a different mean pnl each day, so pooled ranges are told apart."""
    n, mean = 1000, 2e-5 * (k + 1)
    return OracleDay(n_bars=n, pnl_sum=n * mean, pnl_sq_sum=n * (mean**2 + 1e-8), gross_sum=n * mean,
                     cost_sum=1e-3, turnover=40.0, trades=20 + k)


def land_sidecars(landing: Path, days: Sequence[date], roots: Sequence[str] = ("ES", "ZN"),
                  with_sidecar: bool = True) -> list[Path]:
    landing.mkdir(parents=True, exist_ok=True)
    config = generator_config(roots, "ohlcv-1m", days[0], seed=7, random_walk=False)
    files = []
    for k, day in enumerate(days):
        f = landing / dbn_file_name(day, "ohlcv-1m")
        f.write_bytes(b"")
        if with_sidecar:
            write_sidecar(f, day, config, {r: oracle_day(k + i) for i, r in enumerate(roots)})
        files.append(f)
    return files
