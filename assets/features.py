"""Feature assets: continuous_bars -> features (parquet + contract) -> training_dataset."""

import dagster as dg
import polars as pl

from assets.common import EAGER_AFTER_CHECKS, OWNERS, check_result, code_version_of, markdown_table
from assets.ingestion import continuous_bars
from resources.storage import FoxhuntStorage

FEATURES_CHECK = "features_contract"
DATASET_CHECK = "training_dataset_finite"


class FeaturesConfig(dg.Config):
    """Which feature groups to compute (empty = the default set) and what to do with a root
    that has fewer bars than the warm-up."""

    groups: list[str] = []
    min_rows_policy: str = "error"


class DatasetConfig(dg.Config):
    train_fraction: float = 0.7
    validation_fraction: float = 0.15
    lookback: int = 60
    horizon: int = 5
    cost_ticks: float = 1.0
    fee_per_contract: float = 1.0


@dg.asset(
    deps=[continuous_bars],
    group_name="features",
    kinds={"polars", "parquet", "duckdb"},
    owners=OWNERS,
    code_version=code_version_of(
        "foxhunt_pipeline.features.library", "foxhunt_pipeline.features.grid",
        "foxhunt_pipeline.features.calendar_inputs", "foxhunt_pipeline.features.targets",
    ),
    automation_condition=EAGER_AFTER_CHECKS,
    check_specs=[
        dg.AssetCheckSpec(
            FEATURES_CHECK, asset="features", blocking=True,
            description="declared columns and dtypes, finite after warm-up, targets null only at "
            "the last 5 bars of each contract",
        )
    ],
    description="Observed features (f_*, past data only), known-future inputs (k_*), static inputs "
    "(s_*) and forward-return targets (y_1..y_5) on a regular in-session grid.",
)
def features(context: dg.AssetExecutionContext, config: FeaturesConfig, storage: FoxhuntStorage):
    from foxhunt_pipeline.features import FeatureConfig, build_features
    from foxhunt_pipeline.features.schema import validate_features
    from foxhunt_pipeline.storage import object_store

    source = storage.table_path("continuous_bars")
    if not source.is_file():
        raise dg.Failure(f"{source} is missing: materialize continuous_bars first")
    cfg = FeatureConfig(min_rows_policy=config.min_rows_policy)
    if config.groups:
        cfg = FeatureConfig(groups=tuple(config.groups), min_rows_policy=config.min_rows_policy)
    frame = build_features(object_store.read_parquet(source), cfg)
    result = validate_features(frame)
    path = storage.table_path("features")
    if result.passed:
        object_store.write_parquet(frame, path)
        object_store.refresh_duckdb_views(storage.duckdb_path, storage.warehouse_root)
    else:
        context.log.error(f"features contract failed: {result.message}; previous version kept")
    groups = {p: sum(c.startswith(p) for c in frame.columns) for p in ("f_", "k_", "s_", "y_")}
    yield dg.MaterializeResult(
        metadata={
            "rows": dg.MetadataValue.int(frame.height),
            "observed_features": dg.MetadataValue.int(groups["f_"]),
            "known_inputs": dg.MetadataValue.int(groups["k_"]),
            "static_inputs": dg.MetadataValue.int(groups["s_"]),
            "targets": dg.MetadataValue.int(groups["y_"]),
            "filled_fraction": float(frame["is_filled"].mean() or 0.0) if frame.height else 0.0,
            "path": dg.MetadataValue.path(str(path)),
        }
    )
    yield check_result(FEATURES_CHECK, result)


@dg.asset(
    deps=[features],
    group_name="features",
    kinds={"numpy", "pytorch"},
    owners=OWNERS,
    code_version=code_version_of("foxhunt_pipeline.features.dataset", "models.windows"),
    automation_condition=EAGER_AFTER_CHECKS,
    check_specs=[
        dg.AssetCheckSpec(
            DATASET_CHECK, asset="training_dataset", blocking=True,
            description="every model input (observed, known, static) finite and no infinite "
            "target; a failing dataset is not stored and the previous one stays live",
        )
    ],
    description="Chronological train / validation / test split with an embargo gap, train-only "
    "normalisation, windows of `lookback` history steps and `horizon` targets, stored as one "
    "matrix per split plus window start indices.",
)
def training_dataset(context: dg.AssetExecutionContext, config: DatasetConfig, storage: FoxhuntStorage):
    from foxhunt_pipeline.features.dataset import DatasetConfig as BuildConfig
    from foxhunt_pipeline.features.dataset import build_training_dataset
    from foxhunt_pipeline.features.finite import describe, nonfinite_columns
    from foxhunt_pipeline.storage import dataset_store, object_store

    frame = object_store.read_parquet(storage.table_path("features"))
    test_fraction = 1.0 - config.train_fraction - config.validation_fraction
    closes = object_store.read_parquet(
        storage.table_path("continuous_bars"), columns=["ts_event", "root", "close"]
    )
    data = build_training_dataset(
        frame,
        BuildConfig(
            fractions=(config.train_fraction, config.validation_fraction, test_fraction),
            lookback=config.lookback, horizon=config.horizon, cost_ticks=config.cost_ticks,
            fee_per_contract=config.fee_per_contract,
        ),
        close_prices=closes,
    )
    bad = nonfinite_columns(data)
    if bad:
        path = "(not stored: the previous dataset stays live)"
        context.log.error(f"training_dataset: {describe(bad)}; previous dataset kept")
    else:
        path = dataset_store.save(data, storage.warehouse_root, storage.run_scratch)
    splits = data.meta["splits"]
    table = pl.DataFrame(
        [{"split": k, **{kk: str(vv) for kk, vv in v.items()}} for k, v in splits.items()]
    )
    yield dg.MaterializeResult(
        metadata={
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
        }
    )
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
