"""Bad files through the real assets (issue 18): a file of an unknown product or of another
bar size is refused at raw_bars with the file named, and the good files landed with it
still reach continuous_bars; NaN features keep the previous training dataset live; a
training run that diverges is not retried."""

from __future__ import annotations

from datetime import date, timedelta

import dagster as dg
import numpy as np
import polars as pl

from foxhunt_pipeline.cli.runner import materialize_selection
from foxhunt_pipeline.config.paths import FoxhuntPaths
from foxhunt_pipeline.storage.warehouse import raw_bars_partition_path
from foxhunt_pipeline.synthetic.dbn_writer import Mapping, generate_file, ohlcv_records

DAY = date(2024, 1, 3)
START = 1_704_240_000_000_000_000  # 2024-01-03T00:00Z
STEP = {"ohlcv-1m": 60 * 10**9, "ohlcv-1h": 3600 * 10**9}


def _land(path, symbol: str, price: float, schema: str = "ohlcv-1m", n: int = 30,
          iid: int = 101) -> None:
    ts = START + 14 * 3600 * 10**9 + np.arange(n, dtype=np.int64) * STEP[schema]
    close = (price + np.arange(n) * 0.01 * price / 100) * 1e9
    high, low = close * 1.001, close * 0.999
    recs = ohlcv_records(iid, ts, close.astype(np.int64), high.astype(np.int64),
                         low.astype(np.int64), close.astype(np.int64), np.full(n, 10), schema=schema)
    root = symbol[:-2]
    generate_file(path, recs, schema=schema, start=START, end=START + 2 * 86_400 * 10**9,
                  symbols=[f"{root}.FUT"], mappings=[Mapping(symbol, iid, DAY, date(2024, 1, 5))])


def test_a_bad_file_is_refused_by_name_and_later_good_files_still_flow(foxhunt_home):
    paths = FoxhuntPaths.from_env().ensure()
    _land(paths.landing / "a-cattle.ohlcv-1m.dbn.zst", "LEG4", 180.0)  # not in the table
    _land(paths.landing / "b-es.ohlcv-1h.dbn.zst", "ESH4", 4800.0, schema="ohlcv-1h")
    _land(paths.landing / "c-euro.ohlcv-1m.dbn.zst", "6EH4", 1.09, iid=202)  # FX: now in the table
    _land(paths.landing / "d-es.ohlcv-1m.dbn.zst", "ESH4", 4800.0)
    log: list[str] = []
    ok = materialize_selection(paths, ["raw_bars", "continuous_bars"], profile="fast",
                               echo=log.append)
    assert not ok  # two files were refused ...
    text = "\n".join(log)
    assert "a-cattle.ohlcv-1m.dbn.zst: futures root(s) LE not in the instrument table" in text
    assert "b-es.ohlcv-1h.dbn.zst: ohlcv-1h bars are not supported" in text
    assert "land ohlcv-1m files instead" in text
    for refused in ("a-cattle.ohlcv-1m.dbn.zst", "b-es.ohlcv-1h.dbn.zst"):
        assert not raw_bars_partition_path(paths.warehouse, refused).exists()
    # ... and the good ones still made it all the way, at their own bar size
    assert any(line.startswith("[ok] continuous_bars") for line in log), log
    cont = pl.read_parquet(paths.warehouse / "continuous_bars" / "trade_date=*" / "*.parquet")
    per_root = dict(cont.group_by("root").len().iter_rows())
    assert per_root == {"ES": 30, "6E": 30}
    steps = cont.filter(pl.col("root") == "ES")["ts_event"].diff().drop_nulls().unique()
    assert steps.to_list() == [timedelta(minutes=1)]


def _dataset_inputs(paths: FoxhuntPaths) -> pl.DataFrame:
    from foxhunt_pipeline.features import build_features
    from tests.features_fixtures import make_continuous, write_by_date

    bars = make_continuous(days=10, roots=("ES",), roll_after_day=4, session_fraction=0.3,
                           start=date(2024, 3, 4))
    write_by_date(paths.warehouse, "continuous_bars", bars)
    return build_features(bars)


def test_nan_features_keep_the_previous_training_dataset(foxhunt_home):
    from assets.features import DATASET_CHECK, training_dataset
    from resources.storage import FoxhuntStorage
    from tests.features_fixtures import write_by_date

    paths = FoxhuntPaths.from_env().ensure()
    feats = _dataset_inputs(paths)
    write_by_date(paths.warehouse, "features", feats)
    resources = {"storage": FoxhuntStorage(home=str(paths.home))}
    first = dg.materialize([training_dataset], resources=resources)
    assert first.success
    stored = paths.warehouse / "training_dataset"
    before = {p.relative_to(stored): p.read_bytes() for p in stored.rglob("*") if p.is_file()}
    assert before

    f_col = next(c for c in feats.columns if c.startswith("f_"))
    bad = feats.with_columns(
        pl.when(pl.int_range(pl.len()) % 50 == 0).then(float("nan")).otherwise(pl.col(f_col))
        .cast(pl.Float32).alias(f_col),
        pl.when(pl.int_range(pl.len()) == 7).then(float("inf")).otherwise(pl.col("k_rth"))
        .cast(pl.Float32).alias("k_rth"),
    )
    write_by_date(paths.warehouse, "features", bad)
    second = dg.materialize([training_dataset], resources=resources, raise_on_error=False)
    check = second.get_asset_check_evaluations()[0]
    assert check.check_name == DATASET_CHECK and not check.passed
    message = check.metadata["message"].value
    assert f"train.{f_col}" in message and "k_rth" in message
    after = {p.relative_to(stored): p.read_bytes() for p in stored.rglob("*") if p.is_file()}
    # the previous dataset is what training still reads: its files and the live meta.json
    # are unchanged (the rejected dates' blocks may be added beside them, never over them)
    assert {k: after.get(k) for k in before} == before


def test_a_diverging_training_run_is_not_retried(foxhunt_home):
    from assets.training import tft_model
    from resources.mlflow_tracking import MLflowResource
    from resources.pipes import build_pipes_subprocess_client
    from resources.storage import FoxhuntStorage
    from resources.torch_device import TorchDevice
    from tests.model_data import synthetic_training_data

    paths = FoxhuntPaths.from_env().ensure()
    data = synthetic_training_data({"train": 300, "validation": 120, "test": 120})
    data.splits["train"].observed[:] = np.nan  # deterministic: loss is nan on every try
    data.save(paths.warehouse / "training_dataset")
    config = {"epochs": 1, "max_batches_per_epoch": 2, "hidden": 8, "heads": 2,
              "lstm_layers": 1, "var_width": 2, "batch_size": 16}
    res = dg.materialize(
        [tft_model],
        resources={
            "storage": FoxhuntStorage(home=str(paths.home)),
            "mlflow": MLflowResource(home=str(paths.home)),
            "torch_device": TorchDevice(prefer="cpu", threads=1),
            "pipes_subprocess_client": build_pipes_subprocess_client(),
        },
        run_config={"ops": {"tft_model": {"config": config}}},
        raise_on_error=False,
    )
    assert not res.success
    types = [e.event_type for e in res.all_events]
    assert dg.DagsterEventType.STEP_UP_FOR_RETRY not in types
    failure = next(e for e in res.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE)
    assert "loss is nan" in failure.event_specific_data.error.message
    assert "Not retried" in failure.event_specific_data.error.message
