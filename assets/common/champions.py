"""What the leaderboard compares: its Config, each family's champion on today's protocol
(re-scored when it has no row there) and the paired comparison on the stored test bars."""

import tempfile
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl
from mlflow.artifacts import download_artifacts

from assets.common.evaluation_config import EvaluationConfig
from assets.common.model_runs import load_dataset
from assets.common.production_settings import production_settings
from assets.common.walk_forward import run_walk_forward, store_bars
from models.agents import forecast_memo
from models.evaluation.evaluation_table import evaluation_rows
from models.evaluation.leaderboard import champion_on_protocol
from models.evaluation.leaderboard_report import evaluation_row
from models.evaluation.paired import (
    Bars,
    PairedComparison,
    PairedComparisonError,
    aligned_pnl,
    compare,
    family_wise_level,
)
from models.evaluation.promotion import candidate_key, n_paired_tests
from resources.mlflow_tracking import MLflowResource
from resources.storage import BARS_TABLE, EVALUATIONS_TABLE, FoxhuntStorage


class LeaderboardConfig(dg.Config):
    """The promotion rule's parameters (``models.evaluation.promotion``): the family-wise
    error of the paired tests, the bootstrap, and whether a champion without a row on the
    protocol is re-scored."""

    alpha: float = 0.05  # family-wise error over every paired test of the table
    resamples: int = 1000  # stationary-bootstrap resamples of the paired tests and the MCS
    seed: int = 0
    rescore_champions: bool = True  # re-score a champion that has no row on the protocol


def oracle_sharpe(oracle: dict | None) -> dg.MetadataValue:
    """The oracle's pooled Sharpe after costs, "-" when undefined or there is no oracle."""
    v = None if oracle is None else oracle.get("sharpe")
    return dg.MetadataValue.float(float(v)) if v is not None else dg.MetadataValue.text("-")


def rescore_champion(context: dg.AssetExecutionContext, storage: FoxhuntStorage,
                     mlflow: MLflowResource, champion: dict) -> list[dict]:
    """Evaluate the champion's registered artifact under today's walk-forward protocol (its
    configuration retrained on each fold, as every evaluation does); returns the new rows."""
    family = champion["family"]
    config = EvaluationConfig()
    with tempfile.TemporaryDirectory(dir=storage.scratch) as tmp:
        ckpt = Path(download_artifacts(run_id=champion["run_id"], artifact_path="checkpoint",
                                       dst_path=tmp, tracking_uri=mlflow.resolved_uri()))
        # an ensemble champion is retrained from today's member forecasters' configurations
        settings = production_settings(family, storage, mlflow, champion["run_id"], ckpt, "cpu")
        with forecast_memo.on_disk(storage.forecast_cache):
            result = run_walk_forward(family, ckpt, load_dataset(storage), config, "cpu",
                                      context.log.info, settings,
                                      cache_dir=storage.fold_model_cache)
    rows = evaluation_rows(family, champion["version"], "fp32", result, context.run.run_id,
                           datetime.now(UTC))
    part = f"{family}-rescore-{context.run.run_id}"
    storage.append_rows(EVALUATIONS_TABLE, rows, part)
    store_bars(storage, result, champion["version"], part)
    return [evaluation_row(r) for r in rows.iter_rows(named=True)]


def protocol_bars(storage: FoxhuntStorage, protocol: str) -> tuple[dict[str, Bars], float]:
    """Every candidate's stored test bars on ``protocol`` by ``candidate_key`` (a version
    scored twice keeps one copy of each bar), and the bars per year they annualise with."""
    # only the columns used, the repeated strings as categories: a year's 13 scored versions
    # are 3M rows, and their strings once each per row doubled the leaderboard's memory
    labels = ["model", "version", "root"]
    frame = storage.read_parts(f"{BARS_TABLE}/{protocol}", [*labels, "ts_event", "pnl", "bars_per_year"])
    if frame.is_empty():
        return {}, float("nan")
    frame = (frame.with_columns(pl.col(c).cast(pl.Categorical) for c in labels)
             .unique([*labels, "ts_event"], keep="last", maintain_order=True))
    out = {}
    for (model, version), part in frame.group_by(["model", "version"], maintain_order=True):
        key = candidate_key({"model": model, "version": version})
        root = np.asarray(part["root"].cast(pl.String).to_list(), dtype=str)
        out[key] = Bars(root, part["ts_event"].dt.epoch("ns").to_numpy(), part["pnl"].to_numpy())
    return out, float(frame["bars_per_year"][0])


def paired_comparison(storage: FoxhuntStorage, protocol: str, rows: list[dict],
                champions: dict[str, dict | None], naive: list[str], config: LeaderboardConfig
                ) -> tuple[PairedComparison | None, str]:
    """The paired comparison of the rows, their champions and the naive baselines on the
    protocol's test bars; ``(None, why)`` when the bars are not there."""
    bars, bars_per_year = protocol_bars(storage, protocol)
    wanted = [candidate_key(r) for r in rows]
    wanted += [candidate_key(c) for c in champions.values() if c is not None]
    wanted += [b for b in naive if b in bars]
    missing = sorted({k for k in wanted if k not in bars})
    if not bars or len(missing) == len(set(wanted)):
        return None, (f"no test bars stored for protocol {protocol} (evaluated before paired "
                      "comparisons): re-materialize the evaluations")
    try:
        pnl = aligned_pnl({k: bars[k] for k in dict.fromkeys(wanted) if k in bars})
    except PairedComparisonError as e:
        return None, f"paired comparison refused: {e}"
    level = family_wise_level(n_paired_tests(len(rows), len([b for b in naive if b in bars])),
                              config.alpha)
    return compare(pnl, bars_per_year, level=level, resamples=config.resamples,
                   seed=config.seed), ""


def current_champions(context: dg.AssetExecutionContext, storage: FoxhuntStorage,
                       mlflow: MLflowResource, config: LeaderboardConfig, refs: dict[str, dict],
                       evaluations: list[dict], protocol: str
                       ) -> tuple[dict[str, dict | None], dict[str, str], list[str]]:
    """Per family its champion's row on ``protocol`` (re-scored when it has none and the
    Config allows), why a comparison was refused, and a note per re-scored champion."""
    champions: dict[str, dict | None] = {}
    refused: dict[str, str] = {}
    notes = []

    def rescore(champ: dict) -> list[dict]:
        return rescore_champion(context, storage, mlflow, champ)

    for family, ref in refs.items():
        row, how = champion_on_protocol(ref, evaluations, protocol,
                                        rescore if config.rescore_champions else None)
        champions[family] = row
        if row is None:
            refused[family] = how
        elif how == "re-scored":
            notes.append(f"- champion {ref['model']} v{ref['version']} was re-scored on this "
                         "protocol before the comparison")
    return champions, refused, notes
