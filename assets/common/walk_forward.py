"""A family's walk-forward next to every baseline (the evaluation assets, and the leaderboard
when it re-scores a champion on a newer protocol), and its test bars and baselines in the
warehouse."""

from collections.abc import Callable
from pathlib import Path

import dagster as dg
import polars as pl

from assets.common.evaluation_config import EvaluationConfig, walk_forward_config
from foxhunt_pipeline.features.grid import trade_dates
from models.evaluation.compared import baseline_candidates, n_compared
from models.evaluation.evaluation_table import bars_frame
from models.evaluation.family_candidates import production_candidate
from models.evaluation.row_pool import WalkForwardError, row_pool
from models.evaluation.walk_forward import protocol_id_for, walk_forward
from resources.storage import BARS_TABLE, EVALUATIONS_TABLE, FoxhuntStorage


def run_walk_forward(family: str, checkpoint: Path, data, config: EvaluationConfig, device: str,
                     log=None, settings=None, scored: Callable[[str], set] | None = None,
                     cache_dir: Path | None = None):
    """Walk-forward of one family next to every baseline (used by the evaluation assets and
    by the leaderboard when it re-scores a champion on a newer protocol). ``scored(protocol)``
    names the baselines already in model_evaluations under that protocol: they are not
    scored again (they are deterministic). ``cache_dir`` keeps the forecasters' fold models
    for the ensemble's and the agents' walk-forwards."""

    def on_fold(fold, fold_data) -> None:
        if log is not None:
            d = fold.describe()
            log(f"{family} fold {fold.number}: train {d['train']}, validation {d['validation']}, "
                f"test {d['test']} ({fold_data.splits['test'].n_windows} test windows)")

    try:
        pool = row_pool(data, trade_dates)
        baselines = baseline_candidates()
        if scored is not None:
            done = scored(protocol_id_for(pool, walk_forward_config(config),
                                          n_compared=n_compared(),
                                          cost_multiplier=config.cost_multiplier,
                                          bootstrap=config.bootstrap,
                                          threshold_k=config.threshold_k))
            baselines = [b for b in baselines if b.name not in done]
        candidates = [production_candidate(family, checkpoint, settings, device=device,
                                           cache_dir=cache_dir), *baselines]
        return walk_forward(pool, candidates, walk_forward_config(config),
                            n_compared=n_compared(), cost_multiplier=config.cost_multiplier,
                            threshold_k=config.threshold_k, bootstrap=config.bootstrap,
                            seed=config.seed, on_fold=on_fold)
    except WalkForwardError as e:
        raise dg.Failure(f"{family} walk-forward evaluation: {e}") from e


def store_bars(storage: FoxhuntStorage, result, version: str, part: str) -> None:
    """Append the result's bars under its protocol (``BARS_TABLE/<protocol_id>/``)."""
    storage.write_part(f"{BARS_TABLE}/{result.protocol_id}", part, bars_frame(result, version))


def scored_baselines(storage: FoxhuntStorage, protocol_id: str) -> set[str]:
    """Baselines with a pooled row under ``protocol_id`` in model_evaluations."""
    df = storage.read_rows(EVALUATIONS_TABLE)
    if df.is_empty() or not {"protocol_id", "fold"} <= set(df.columns):
        return set()
    hit = df.filter((pl.col("protocol_id") == protocol_id) & (pl.col("fold") == "pooled")
                    & (pl.col("family") == "baseline"))
    return set(hit.get_column("model").to_list())
