"""A small warehouse as the assets leave it: continuous_bars and features of five ES trade
dates (Mon 2024-03-04 .. Fri 03-08, full sessions, a few minutes without a trade), a tiny
TFT trained on nothing and a LightGBM fitted on the dates, exported as the training assets
export forecasters."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import polars as pl
import pytest
from upath import UPath

from foxhunt_pipeline.features import by_date
from foxhunt_pipeline.features.dataset import DatasetConfig, build_training_dataset
from foxhunt_pipeline.forecasting.frame import ForecastModel
from foxhunt_pipeline.instruments.rolls import trade_date
from foxhunt_pipeline.serving.loaded import LoadedModel
from foxhunt_pipeline.storage import continuous_dates, object_store, trade_dates
from tests.features_fixtures import make_continuous
from tests.resources.pyfunc_fixtures import forecaster_artifact, lightgbm_artifact

LOOKBACK, HORIZON = 12, 3
DAYS = [date(2024, 3, 4), date(2024, 3, 5), date(2024, 3, 6), date(2024, 3, 7), date(2024, 3, 8)]


@dataclass(frozen=True)
class Home:
    warehouse: Path
    artifacts: dict[str, Path]  # family -> exported artifact
    costs: dict[str, float]

    def copy(self, to: Path) -> UPath:
        """A private copy of the warehouse (a test that changes it)."""
        shutil.copytree(self.warehouse, to)
        return UPath(to)

    def model(self, version: str = "1", family: str = "tft", threshold_k: float = 1.0
              ) -> ForecastModel:
        return ForecastModel(LoadedModel.load(self.artifacts[family]), f"foxhunt-{family}",
                             version, family, threshold_k=threshold_k)


@pytest.fixture(scope="package")
def home(tmp_path_factory: pytest.TempPathFactory) -> Home:
    base = tmp_path_factory.mktemp("forecasting")
    root = UPath(base / "warehouse")
    bars = make_continuous(days=len(DAYS), roots=("ES",), start=DAYS[0], roll_after_day=None,
                           missing_frac=0.05, constant_minutes=0, seed=3)
    dated = bars.with_columns(day=trade_date(pl.col("ts_event")))
    for d in DAYS:
        trade_dates.write_part(root, continuous_dates.TABLE, d,
                               dated.filter(pl.col("day") == d).drop("day"))
    fronts = dated.select("root", "day", "symbol", "contract_seq", "expiry").unique().sort("day")
    object_store.write_parquet(fronts, continuous_dates.state_path(root, "fronts"))
    by_date.build_dates(root, DAYS[0], DAYS[-1])
    features = trade_dates.read_dates(root, by_date.TABLE)
    data = build_training_dataset(features, DatasetConfig(lookback=LOOKBACK, horizon=HORIZON,
                                                          fractions=(0.6, 0.2, 0.2)))
    artifacts = {"tft": forecaster_artifact("tft", data, base / "tft"),
                 "lightgbm": lightgbm_artifact(data, base / "lightgbm")}
    costs = dict(zip(data.meta["roots"], data.meta["cost_log_return"], strict=True))
    return Home(Path(root.path), artifacts, costs)
