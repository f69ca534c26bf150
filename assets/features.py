"""Feature assets: continuous_bars -> features (parquet + contract) -> training_dataset."""

from datetime import date

import dagster as dg
import polars as pl
from pydantic import Field

from assets.common import (
    EAGER_OVER_HISTORY,
    OWNERS,
    RETRAIN_ON_DECAY,
    check_result,
    code_version_of,
    markdown_table,
    passed_validation,
    report_warnings,
)
from assets.common.config_fields import delegated, sized
from assets.common.partitions import partition_dates, trade_dates, window_dates
from assets.ingestion import continuous_bars
from foxhunt_pipeline.features import FeatureConfig, by_date, dataset_dates
from foxhunt_pipeline.features.coverage import dataset_warnings
from foxhunt_pipeline.features.dataset import DatasetConfig
from foxhunt_pipeline.features.finite import describe
from foxhunt_pipeline.features.schema import validate_features
from foxhunt_pipeline.storage import dataset_store, object_store
from foxhunt_pipeline.storage import trade_dates as stored
from resources.storage import FoxhuntStorage

FEATURES_CHECK = "features_contract"
DATASET_CHECK = "training_dataset_finite"


class FeaturesConfig(dg.Config):
    """Which feature groups to compute (empty = the default set) and what to do with a root
    that has fewer bars than the warm-up."""

    groups: list[str] = []
    min_rows_policy: str = "error"


class TrainingDatasetConfig(dg.Config):
    """``training_dataset``'s run config: the library's ``DatasetConfig`` (defaults defined
    there, once) as flat fields, and which stored trade dates it spans."""

    train_fraction: float = Field(DatasetConfig().fractions[0],
                                  description="Share of the trade dates for training.")
    validation_fraction: float = Field(DatasetConfig().fractions[1],
                                       description="Share for validation (early stopping); "
                                       "the test split is the rest.")
    lookback: int = delegated(DatasetConfig, "lookback", "History bars per window.")
    horizon: int = delegated(DatasetConfig, "horizon", "Forecast horizons (bars).")
    cost_ticks: float = delegated(DatasetConfig, "cost_ticks", "One-way cost of a position "
                                  "change in ticks (half spread + slippage).")
    fee_per_contract: float = delegated(DatasetConfig, "fee_per_contract", "Exchange + broker "
                                        "fee per contract per side, in currency.")
    start_date: str = Field("", description="First trade date (YYYY-MM-DD); empty: the first stored.")
    end_date: str = Field("", description="Last trade date (YYYY-MM-DD); empty: the last stored.")
    last_days: int = sized("training_dataset", "last_days", 0,
                           "At most this many trade dates (the latest of the window); 0: all.")

    def window(self, dates: list) -> tuple:
        """(first, last) trade date of the dataset among the stored ``dates``."""
        lo = date.fromisoformat(self.start_date) if self.start_date else None
        hi = date.fromisoformat(self.end_date) if self.end_date else None
        inside = [d for d in dates if (lo is None or d >= lo) and (hi is None or d <= hi)]
        if self.last_days > 0:
            inside = inside[-self.last_days:]
        if not inside:
            raise dg.Failure(f"no stored features date in [{lo or 'start'}, {hi or 'end'}]")
        return inside[0], inside[-1]


@dg.asset(
    partitions_def=trade_dates,
    backfill_policy=dg.BackfillPolicy.single_run(),
    # a date's targets read the next date's first bars; its warm-up (the segment so far) is
    # read from the stored earlier dates (docs/contracts.md, "Partitions")
    deps=[dg.AssetDep(continuous_bars, partition_mapping=dg.TimeWindowPartitionMapping(
        start_offset=0, end_offset=1, allow_nonexistent_upstream_partitions=True))],
    group_name="features",
    kinds={"polars", "parquet", "duckdb"},
    owners=OWNERS,
    code_version=code_version_of(
        "foxhunt_pipeline.features.by_date", "foxhunt_pipeline.features.library",
        "foxhunt_pipeline.features.grid", "foxhunt_pipeline.features.calendar_inputs",
        "foxhunt_pipeline.features.targets",
    ),
    check_specs=[
        dg.AssetCheckSpec(
            FEATURES_CHECK, asset="features", blocking=True,
            description="declared columns and dtypes, finite after warm-up, targets null only at "
            "the last 5 bars of each contract",
        )
    ],
    description="Observed features (f_*, past data only), known-future inputs (k_*), static inputs "
    "(s_*) and forward-return targets (y_1..y_5) on a regular in-session grid, one partition per "
    "CME trade date, equal to the same date of a full rebuild.",
)
def features(context: dg.AssetExecutionContext, config: FeaturesConfig, storage: FoxhuntStorage):
    root = storage.warehouse_root
    if not stored.has_dates(root, "continuous_bars"):
        raise dg.Failure(f"{root / 'continuous_bars'} holds no trade date: materialize continuous_bars first")
    cfg = FeatureConfig(min_rows_policy=config.min_rows_policy)
    if config.groups:
        cfg = FeatureConfig(groups=tuple(config.groups), min_rows_policy=config.min_rows_policy)
    failed: list = []
    columns: set[str] = set()

    def passes(frame: pl.DataFrame) -> bool:
        columns.update(frame.columns)
        result = validate_features(frame)
        if not result.passed:
            failed.append(result)
        return result.passed

    first, last = window_dates(context)
    build = by_date.build_dates(root, first, last, cfg, validate=passes)
    object_store.refresh_duckdb_views(storage.duckdb_path, root)
    if failed:
        context.log.error(f"features contract failed: {failed[0].message}; previous version kept")
    groups = {p: sum(c.startswith(p) for c in columns) for p in ("f_", "k_", "s_", "y_")}
    for key in context.partition_keys:  # each partition's own numbers (a range runs as one run)
        lo, hi = partition_dates(key)
        mine = [n for d, n in build.rows.items() if lo <= d <= hi]
        context.add_asset_metadata({
            "rows": dg.MetadataValue.int(sum(mine)),
            "dates": dg.MetadataValue.int(len(mine)),
            "path": dg.MetadataValue.path(str(stored.date_dir(root, "features", lo))),
            **report_warnings(context, build.warnings_of(lo, hi)),
        }, partition_key=key)
    yield dg.MaterializeResult(
        metadata={
            "observed_features": dg.MetadataValue.int(groups["f_"]),
            "known_inputs": dg.MetadataValue.int(groups["k_"]),
            "static_inputs": dg.MetadataValue.int(groups["s_"]),
            "targets": dg.MetadataValue.int(groups["y_"]),
        }
    )
    yield check_result(FEATURES_CHECK, failed[0] if failed else passed_validation())


@dg.asset(
    deps=[features],
    group_name="features",
    kinds={"numpy", "pytorch"},
    owners=OWNERS,
    code_version=code_version_of("foxhunt_pipeline.features.dataset", "foxhunt_pipeline.features.dataset_dates",
                                 "foxhunt_pipeline.storage.dataset_store", "models.windows"),
    automation_condition=EAGER_OVER_HISTORY | RETRAIN_ON_DECAY,
    check_specs=[
        dg.AssetCheckSpec(
            DATASET_CHECK, asset="training_dataset", blocking=True,
            description="every model input (observed, known, static) finite and no infinite "
            "target; a failing dataset is not stored and the previous one stays live",
        )
    ],
    description="Chronological train / validation / test split with an embargo gap, train-only "
    "normalisation, windows of `lookback` history steps and `horizon` targets. Stored raw, one "
    "block per trade date (a new date adds its block); readers get one matrix per split plus "
    "window start indices.",
)
def training_dataset(context: dg.AssetExecutionContext, config: TrainingDatasetConfig,
                     storage: FoxhuntStorage):
    root = storage.warehouse_root
    first, last = config.window(stored.stored_dates(root, "features"))
    context.log.info(f"training_dataset over trade dates {first} .. {last}")
    # raw per-date blocks, summarised once each; the split, embargo and train-only
    # normalisation are applied when a trainer reads the dataset (dataset_store.local_dir)
    with dataset_store.updating(root):
        done = dataset_dates.update(root, _build_config(config), first, last)
        data = done.data
        bad = data.meta["nonfinite"]
        if bad:
            path = "(not stored: the previous dataset stays live)"
            context.log.error(f"training_dataset: {describe(bad)}; previous dataset kept")
        else:
            path = dataset_dates.publish(root, done)
    said = report_warnings(context, dataset_warnings(data))
    yield dg.MaterializeResult(metadata={**_dataset_metadata(done, path), **said})
    yield dg.AssetCheckResult(
        check_name=DATASET_CHECK,
        passed=not bad,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "nonfinite_columns": dg.MetadataValue.int(len(bad)),
            "message": describe(bad),
            "counts": dg.MetadataValue.json(bad),
        },
    )


def _build_config(config: TrainingDatasetConfig) -> DatasetConfig:
    """The library's dataset config for the asset's: the test split is what the train and
    validation fractions leave."""
    test_fraction = 1.0 - config.train_fraction - config.validation_fraction
    return DatasetConfig(
        fractions=(config.train_fraction, config.validation_fraction, test_fraction),
        lookback=config.lookback, horizon=config.horizon, cost_ticks=config.cost_ticks,
        fee_per_contract=config.fee_per_contract,
    )


def _dataset_metadata(done: dataset_dates.DatasetUpdate, path: object) -> dict:
    """The dataset's splits, inputs, size and where it is, for the asset's metadata."""
    data = done.data
    splits = data.meta["splits"]
    table = pl.DataFrame(
        [{"split": k, **{kk: str(vv) for kk, vv in v.items()}} for k, v in splits.items()]
    )
    return {
        "splits": dg.MetadataValue.md(markdown_table(table)),
        "train_windows": dg.MetadataValue.int(int(splits["train"]["windows"])),
        "validation_windows": dg.MetadataValue.int(int(splits["validation"]["windows"])),
        "test_windows": dg.MetadataValue.int(int(splits["test"]["windows"])),
        "observed_features": dg.MetadataValue.int(len(data.observed_names)),
        "known_inputs": dg.MetadataValue.int(len(data.known_names)),
        "static_inputs": dg.MetadataValue.int(len(data.static_names)),
        "feature_hash": data.meta["feature_hash"],
        "stored_mb": round(sum(s.nbytes() for s in data.splits.values()) / 1e6, 2),
        "path": dg.MetadataValue.path(str(path)),
        "dates_summarised": dg.MetadataValue.int(done.summarised),
        "dates_reused": dg.MetadataValue.int(done.reused),
    }
