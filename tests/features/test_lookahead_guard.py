"""The lookahead guard on the real data path: generator -> DBN decode -> continuous series ->
features -> training dataset -> models -> evaluation. On random-walk data nothing may show
skill; on the default (learnable) data the TFT must beat climatology. If this ever fails on
random-walk data, something leaks the future: fix the leak, never the threshold."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from upath import UPath

from foxhunt_pipeline.features import by_date
from foxhunt_pipeline.features.dataset import DatasetConfig, build_training_dataset
from foxhunt_pipeline.ingest.decode import ingest_dbn_file
from foxhunt_pipeline.storage import continuous_dates, trade_dates
from foxhunt_pipeline.storage.warehouse import raw_bars_partition_path
from foxhunt_pipeline.synthetic.generate import generate
from models.evaluation.evaluate import evaluate_forecaster
from models.tft.model import TemporalFusionTransformer, TFTConfig
from models.training.loop import TrainConfig, train_forecaster

pytestmark = pytest.mark.slow


def _dataset(tmp_path, random_walk: bool):
    landing = tmp_path / "landing"
    files = generate(landing, days=12, roots=("ES",), schema="ohlcv-1m", seed=21, random_walk=random_walk)
    warehouse = tmp_path / "warehouse"
    for f in files:
        ingest_dbn_file(f, raw_bars_partition_path(warehouse, f.name), source_file=f.name)
    # the trade-date partitioned path the assets take (equal to the full rebuild: see
    # tests/storage/test_history_by_date.py)
    root = UPath(warehouse)
    days = continuous_dates.all_dates(root)
    continuous_dates.build_dates(root, days)
    by_date.build_dates(root, days[0], days[-1])
    continuous = trade_dates.read_dates(root, continuous_dates.TABLE).sort("root", "ts_event")
    feats = trade_dates.read_dates(root, by_date.TABLE).sort("root", "ts_event")
    return build_training_dataset(feats, DatasetConfig(), close_prices=continuous)


def _train_tft(data, epochs: int):
    torch.manual_seed(0)
    model = TemporalFusionTransformer(TFTConfig(
        n_static=len(data.static_names), n_observed=len(data.observed_names), n_known=len(data.known_names),
        hidden=16, heads=2, lstm_layers=1, var_width=4,
    ))
    train_forecaster(model, data, TrainConfig(epochs=epochs, batch_size=64, lr=3e-3, max_batches_per_epoch=60,
                                              patience=3, seed=0))
    return model


def test_no_skill_is_found_on_random_walk_data(tmp_path):
    data = _dataset(tmp_path, random_walk=True)
    model = _train_tft(data, epochs=3)
    report = evaluate_forecaster("tft", model, data, out_dir=tmp_path / "eval", latency_calls=0,
                                 bootstrap=300, make_plots=False)
    m = report.metrics
    assert m["directional_accuracy_ci_low"] <= 0.5 <= m["directional_accuracy_ci_high"], m
    assert not m["sharpe_ci_low"] > 0.0, m  # NaN: it never traded, so it claims no skill
    for name, b in report.baselines.items():
        if "sharpe_ci_low" in b and np.isfinite(b["sharpe_ci_low"]):
            assert b["sharpe_ci_low"] <= 0.0, (name, b)


def test_the_tft_beats_climatology_on_learnable_data(tmp_path):
    """The median of 1-minute returns is ~0 whatever the model knows, so P50 q-risk barely
    moves; the learnable structure (volatility clustering and intraday seasonality, which the
    unconditional climatology cannot see) shows in the tails: P90 q-risk and mean pinball loss."""
    data = _dataset(tmp_path, random_walk=False)
    model = _train_tft(data, epochs=8)
    report = evaluate_forecaster("tft", model, data, out_dir=tmp_path / "eval", latency_calls=0,
                                 bootstrap=100, make_plots=False)
    ours, clim = report.metrics, report.baselines["baseline:climatology"]
    assert ours["q_risk_p90"] < clim["q_risk_p90"], (ours["q_risk_p90"], clim["q_risk_p90"])
    assert ours["pinball_mean"] < clim["pinball_mean"], (ours["pinball_mean"], clim["pinball_mean"])
