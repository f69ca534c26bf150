"""Generated market data through the real data path, as a walk-forward row pool: generator
-> DBN decode -> continuous series -> features -> training dataset -> ``row_pool``. Shared
by the skill test and ``benchmarks/walk_forward_skill.py``; no Dagster."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl

from foxhunt_pipeline.features import build_features
from foxhunt_pipeline.features.dataset import DatasetConfig, build_training_dataset
from foxhunt_pipeline.features.grid import trade_dates
from foxhunt_pipeline.features.library import DEFAULT_GROUPS, FeatureConfig
from foxhunt_pipeline.ingest.decode import ingest_dbn_file
from foxhunt_pipeline.instruments.rolls import build_continuous
from foxhunt_pipeline.synthetic import generate
from models.evaluation.row_pool import RowPool, row_pool
from models.windows import TrainingData


def continuous_from(files: Sequence[Path], workdir: Path) -> pl.DataFrame:
    """Landed DBN files decoded into ``workdir/raw`` and rolled into continuous series."""
    parts = []
    for i, f in enumerate(files):
        dest = workdir / "raw" / f"{i}.parquet"
        dest.parent.mkdir(parents=True, exist_ok=True)
        ingest_dbn_file(f, dest)
        parts.append(dest)
    continuous, _ = build_continuous(pl.scan_parquet(parts))
    return continuous


def generated_dataset(workdir: Path, *, days: int, roots: Sequence[str], seed: int = 7,
                      random_walk: bool = False,
                      groups: tuple[str, ...] = DEFAULT_GROUPS) -> TrainingData:
    """The training dataset the assets would build from ``foxhunt generate`` output, with the
    features and dataset assets' defaults (1 tick + $1 fee per side)."""
    files = generate(workdir / "landing", days=days, roots=tuple(roots), seed=seed,
                     random_walk=random_walk)
    continuous = continuous_from(files, workdir)
    features = build_features(continuous, FeatureConfig(groups=groups))
    return build_training_dataset(features, DatasetConfig(fee_per_contract=1.0),
                                  close_prices=continuous)


def generated_pool(workdir: Path, **kwargs) -> RowPool:
    """``generated_dataset`` as one walk-forward row pool, dated by CME trade date."""
    return row_pool(generated_dataset(workdir, **kwargs), trade_dates)
