"""quantize_forecaster / quantize_agent: the one call the quantized assets make."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from models.agents.policy import PolicyNet
from models.export import load_artifact
from models.quantization import Tolerance
from models.quantization.report import quantize_agent, quantize_forecaster
from tests.model_data import synthetic_training_data
from tests.quant_standins import LSTMForecaster

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def data():
    return synthetic_training_data({"train": 600, "validation": 200, "test": 300}, n_observed=4, n_known=2,
                                   n_static=2, lookback=20, horizon=3, segment_length=150)


def test_forecaster_report_exports_accepted_variants_and_recommends(data, tmp_path):
    torch.manual_seed(0)
    model = LSTMForecaster(n_static=2, n_observed=4, n_known=2, horizon=3, hidden=64).eval()
    report = quantize_forecaster(model, data, model_name="tft", out_dir=tmp_path, max_windows=64,
                                 precisions=("fp32", "int8"), latency_repeats=1,
                                 export_formats=("torchscript",))
    by_p = {r["precision"]: r for r in report.rows}
    assert set(by_p) == {"fp32", "int8"} and by_p["int8"]["eval_windows"] == 64
    assert by_p["int8"]["artifact_bytes"] > 0 and by_p["int8"]["artifact_size_ratio"] > 2
    assert set(report.artifacts) == {p for p, r in by_p.items() if r["accepted"]}
    fn, meta = load_artifact(report.artifacts["fp32"])
    assert meta["observed_names"] == data.observed_names and meta["target_scale"] == data.target_scale
    assert meta["evaluation"]["precision"] == "fp32"
    assert report.recommended in report.artifacts and report.reason.startswith(report.recommended)
    md = report.metadata()
    assert md["recommended"] == report.recommended and "int8/metric_rel_change" in md
    saved = json.loads(report.to_json(tmp_path / "report.json").read_text())
    assert saved["recommended"] == report.recommended
    # artifacts are named relative to the report, so a moved home still finds them
    assert {p: (tmp_path / a).resolve() for p, a in saved["artifacts"].items()} == \
        {p: Path(a).resolve() for p, a in report.artifacts.items()}
    assert not any(Path(a).is_absolute() for a in saved["artifacts"].values())


def test_forecaster_report_rejects_beyond_tolerance_and_exports_nothing_for_it(data, tmp_path):
    model = LSTMForecaster(n_static=2, n_observed=4, n_known=2, horizon=3, hidden=8).eval()
    report = quantize_forecaster(model, data, model_name="m", out_dir=tmp_path, max_windows=32,
                                 precisions=("fp32", "int8"), latency_repeats=1,
                                 tolerance=Tolerance(max_rel_loss_increase=-1.0),
                                 export_formats=("torchscript",))
    assert set(report.artifacts) == {"fp32"} and report.recommended == "fp32"
    assert "int8 rejected" in report.reason


def test_agent_report_backtests_each_variant(data, tmp_path):
    torch.manual_seed(0)
    n_channels = len(data.observed_names) + len(data.known_names)
    policy = PolicyNet({"lookback": data.lookback, "n_channels": n_channels, "kind": "mlp", "hidden": 32},
                       [32], "relu", algo="dqn").eval()
    report = quantize_agent(policy, data, model_name="dqn", out_dir=tmp_path, precisions=("fp32", "int8"),
                            latency_repeats=1, max_obs=128)
    by_p = {r["precision"]: r for r in report.rows}
    assert by_p["fp32"]["action_agreement"] == 1.0 and by_p["fp32"]["sharpe_delta"] == 0.0
    int8 = by_p["int8"]
    assert 0 <= int8["action_agreement"] <= 1
    assert int8["accepted"] == (int8["action_agreement"] >= 0.95)
    assert ("int8" in report.artifacts) == int8["accepted"]
    _, meta = load_artifact(report.artifacts["fp32"])
    assert meta["kind"] == "agent" and meta["input_names"] == ["obs"]


def test_an_export_failure_unaccepts_the_variant_and_says_why(data, tmp_path):
    class ViaNumpy(LSTMForecaster):
        def forward(self, static, observed, known):
            out = super().forward(static, observed, known)
            return torch.from_numpy(out.detach().numpy().copy())  # invisible to tracing

    model = ViaNumpy(n_static=2, n_observed=4, n_known=2, horizon=3, hidden=8).eval()
    report = quantize_forecaster(model, data, model_name="m", out_dir=tmp_path, max_windows=16,
                                 precisions=("fp32", "int8"), latency_repeats=1,
                                 export_formats=("torchscript",))
    assert report.artifacts == {}
    assert all(not r["accepted"] and "export failed" in r["reason"] for r in report.rows)
    assert report.recommended == "fp32" and "fp32 itself not deployable" in report.reason
