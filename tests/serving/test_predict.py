"""predict_from_parquet: the training windows, the artifact's normalisation, clear errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest
import torch

from foxhunt_pipeline.features.dataset import DatasetConfig, build_training_dataset
from foxhunt_pipeline.serving.predict import (
    FeatureHashMismatch,
    PredictInputError,
    predict_from_parquet,
    quantile_column,
)
from models.export import export_artifact, forecaster_metadata
from models.quantization import OUTPUT_TOLERANCE, quantize_variants
from tests.quant_standins import LSTMForecaster

LOOKBACK, HORIZON = 12, 3
N_F, N_K, N_S = 4, 3, 2
DAYS, BARS_PER_DAY = 5, 60


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _features(seed: int = 0) -> pl.DataFrame:
    """A features table per docs/contracts.md: two roots, a roll on day 3, minute bars."""
    rng = np.random.default_rng(seed)
    frames = []
    for r, root in enumerate(("ES", "ZN")):
        day0 = datetime(2024, 3, 4, 14, 0, tzinfo=UTC)  # a Monday, mid-session
        ts = [day0 + timedelta(days=d, minutes=m) for d in range(DAYS) for m in range(BARS_PER_DAY)]
        n = len(ts)
        seq = np.repeat(np.arange(DAYS) >= 3, BARS_PER_DAY).astype(np.int32)
        cols: dict[str, object] = {
            "ts_event": pl.Series(ts, dtype=pl.Datetime("ns", "UTC")),
            "root": [root] * n,
            "symbol": [f"{root}{'HM'[s]}4" for s in seq],
            "contract_seq": pl.Series(seq, dtype=pl.Int32),
            "is_filled": [False] * n,
        }
        for i in range(N_F):
            cols[f"f_{i}"] = (rng.normal(3.0 * i, 1 + i, n)).astype(np.float32)
        for i in range(N_K):
            cols[f"k_{i}"] = np.sin(np.arange(n) / (5 + i)).astype(np.float32)
        for i in range(N_S):
            cols[f"s_{i}"] = np.full(n, r + i, dtype=np.float32)
        ret = rng.normal(0, 1e-3, n)
        for h in range(1, 6):
            fwd = np.array([ret[j + 1 : j + 1 + h].sum() if j + h < n and seq[j + h] == seq[j] else np.nan
                            for j in range(n)])
            cols[f"y_{h}"] = pl.Series(fwd, dtype=pl.Float32)
        frames.append(pl.DataFrame(cols))
    return pl.concat(frames)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """A features parquet, the training dataset built from it, fp32 and int8 artifacts."""
    d = tmp_path_factory.mktemp("predict")
    features = _features()
    features.write_parquet(d / "features.parquet")
    data = build_training_dataset(
        features, DatasetConfig(lookback=LOOKBACK, horizon=HORIZON, fractions=(0.6, 0.2, 0.2))
    )
    torch.manual_seed(0)
    model = LSTMForecaster(n_static=N_S, n_observed=N_F, n_known=N_K, horizon=HORIZON, hidden=8).eval()
    ds = data.window_dataset("test")
    example = ds.batch(np.arange(4))
    ex = (example["static"], example["observed"], example["known"])
    int8 = quantize_variants(model, ex, precisions=("int8",))["int8"].module
    paths = {
        p: export_artifact(m, ex, d / p, metadata=forecaster_metadata(data.meta, model="standin", precision=p))
        for p, m in (("fp32", model), ("int8", int8))
    }
    return {"dir": d, "features": features, "data": data, "module": model, "artifact": paths["fp32"],
            "int8_artifact": paths["int8"]}


def _module_on_split(deployed, split):
    data, module = deployed["data"], deployed["module"]
    ds = data.window_dataset(split)
    batch = ds.batch(np.arange(len(ds)))
    with torch.inference_mode():
        want = module(batch["static"], batch["observed"], batch["known"]).numpy() * data.target_scale
    arrays = data.splits[split]
    last = np.asarray(arrays.window_starts) + LOOKBACK - 1
    keys = pl.DataFrame({
        "ts_event": pl.Series(arrays.ts_event[last]).cast(pl.Datetime("ns", "UTC")),
        "root": np.asarray(data.meta["roots"])[arrays.root_index[last]],
    })
    return keys, want


def test_predictions_equal_the_module_on_the_training_windows(deployed):
    data = deployed["data"]
    out = predict_from_parquet(deployed["artifact"], deployed["dir"] / "features.parquet")
    quantiles = data.meta["quantiles"]
    qcols = [quantile_column(h, q) for h in range(1, HORIZON + 1) for q in quantiles]
    assert out.columns == ["ts_event", "root", "contract_seq", "known_filled", *qcols]
    assert out.schema["ts_event"] == pl.Datetime("ns", "UTC")
    assert not out["known_filled"].any()
    for split in ("train", "test"):
        keys, want = _module_on_split(deployed, split)
        got = keys.join(out, on=["ts_event", "root"], how="left", maintain_order="left")
        assert got[qcols[0]].null_count() == 0, f"{split}: a training window has no prediction"
        np.testing.assert_allclose(got.select(qcols).to_numpy().reshape(want.shape), want, rtol=1e-5, atol=1e-9)


def test_int8_artifact_predicts_within_its_tolerance_of_fp32(deployed):
    """Dynamic int8 picks activation scales per batch, so it is close to, not equal to, fp32."""
    out = predict_from_parquet(deployed["int8_artifact"], deployed["dir"] / "features.parquet")
    keys, want = _module_on_split(deployed, "test")
    got = keys.join(out, on=["ts_event", "root"], how="left").drop("ts_event", "root", "contract_seq", "known_filled")
    rel = np.abs(got.to_numpy().reshape(want.shape) - want).max() / np.abs(want).max()
    assert 0 < rel <= OUTPUT_TOLERANCE["int8"]


def test_every_full_window_is_predicted_and_none_crosses_a_roll(deployed):
    features = deployed["features"]
    out = predict_from_parquet(deployed["artifact"], deployed["dir"] / "features.parquet")
    seg_len = features.group_by("root", "contract_seq").len()
    expected = int((seg_len["len"] - LOOKBACK + 1 - HORIZON).clip(0).sum())
    assert out.height == expected
    first = features.group_by("root", "contract_seq").agg(pl.col("ts_event").min().alias("seg_start"))
    joined = out.join(first, on=["root", "contract_seq"])
    assert (joined["ts_event"] - joined["seg_start"] >= timedelta(minutes=LOOKBACK - 1)).all()


def test_hold_last_also_predicts_the_newest_bars_and_flags_them(deployed):
    strict = predict_from_parquet(deployed["artifact"], deployed["dir"] / "features.parquet", root="ES")
    live = predict_from_parquet(deployed["artifact"], deployed["dir"] / "features.parquet", root="ES",
                                future_known="hold_last")
    assert live.height == strict.height + 2 * HORIZON  # two contracts, H newest bars each
    assert live["known_filled"].sum() == 2 * HORIZON
    assert set(live["root"]) == {"ES"}
    latest = deployed["features"].filter(pl.col("root") == "ES")["ts_event"].max()
    assert live["ts_event"].max() == latest


def test_start_end_select_forecast_origins(deployed):
    start = datetime(2024, 3, 5, 14, 20, tzinfo=UTC)
    end = "2024-03-05T14:40:00+00:00"
    out = predict_from_parquet(deployed["artifact"], deployed["dir"] / "features.parquet", root=["ZN"],
                               start=start, end=end)
    assert out.height == 21
    assert out["ts_event"].min() == start and out["root"].unique().to_list() == ["ZN"]


def test_missing_columns_are_named(deployed, tmp_path):
    bad = tmp_path / "bad.parquet"
    deployed["features"].drop("f_2", "k_0").write_parquet(bad)
    with pytest.raises(PredictInputError, match=r"bad.parquet.*f_2, k_0"):
        predict_from_parquet(deployed["artifact"], bad)


def test_a_different_feature_set_is_refused(deployed, tmp_path):
    other = tmp_path / "other.parquet"
    deployed["features"].with_columns(f_9=pl.lit(1.0, pl.Float32)).write_parquet(other)
    with pytest.raises(FeatureHashMismatch, match=r"extra \['f_9'\]"):
        predict_from_parquet(deployed["artifact"], other)
    assert predict_from_parquet(deployed["artifact"], other, check_feature_hash=False).height > 0


def test_non_finite_inputs_skip_their_windows(deployed, tmp_path):
    holes = tmp_path / "holes.parquet"
    f = deployed["features"]
    f.with_columns(
        f_0=pl.when((pl.col("root") == "ES") & (pl.int_range(pl.len()) == 30)).then(None).otherwise(pl.col("f_0"))
    ).write_parquet(holes)
    full = predict_from_parquet(deployed["artifact"], deployed["dir"] / "features.parquet")
    out = predict_from_parquet(deployed["artifact"], holes)
    assert out.height == full.height - LOOKBACK  # the 12 windows whose history holds row 30
    assert out.select(pl.all().exclude("known_filled").is_null().any()).row(0) == (False,) * (out.width - 1)


def test_an_agent_artifact_is_refused(tmp_path, deployed):
    path = export_artifact(torch.nn.Linear(4, 3), (torch.randn(2, 4),), tmp_path / "dqn", metadata={"model": "dqn"})
    with pytest.raises(PredictInputError, match="forecaster"):
        predict_from_parquet(path, deployed["dir"] / "features.parquet")
