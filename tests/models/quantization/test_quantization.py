"""Variants stay close to fp32, are measured, and unsupported ones are reported, not raised."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from models.quantile import pinball_loss
from models.quantization import (
    OUTPUT_TOLERANCE,
    PRECISIONS,
    Tolerance,
    Unsupported,
    Variant,
    batch_of,
    compare_variant,
    evaluate_agent_variants,
    evaluate_forecaster_variants,
    position_pnl,
    quantize_variants,
    recommend,
    state_dict_bytes,
)
from models.sharpe import sharpe_ratio
from tests.quant_standins import ConvScanForecaster, LSTMForecaster, MLPPolicy, forecaster_inputs

QUANTILES = [round(0.1 * i, 1) for i in range(1, 10)]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def lstm_variants():
    torch.manual_seed(0)
    model = LSTMForecaster().eval()
    return model, quantize_variants(model, forecaster_inputs(4))


@pytest.mark.parametrize("model_cls", [LSTMForecaster, ConvScanForecaster])
def test_each_variant_stays_within_its_tolerance_of_fp32(model_cls):
    torch.manual_seed(0)
    model = model_cls().eval()
    variants = quantize_variants(model, forecaster_inputs(4))
    assert set(variants) == set(PRECISIONS)
    fixed = forecaster_inputs(16, seed=7)
    with torch.inference_mode():
        ref = model(*fixed)
    for precision, v in variants.items():
        if isinstance(v, Unsupported):
            continue
        with torch.inference_mode():
            out = v.module(*fixed)
        assert out.dtype == torch.float32 and out.shape == ref.shape
        rel = float((out - ref).abs().max() / ref.abs().max())
        assert rel <= OUTPUT_TOLERANCE[precision], f"{precision}: {rel:.3g}"
        if precision != "fp32":
            assert rel > 0, f"{precision} gave bit-identical outputs: nothing was converted"


def test_int8_quantizes_lstm_and_linear_and_is_at_least_3_5x_smaller():
    model = LSTMForecaster(hidden=128)
    variants = quantize_variants(model, forecaster_inputs(2), precisions=("fp32", "int8"))
    int8 = variants["int8"]
    assert isinstance(int8, Variant)
    qd = torch.ao.nn.quantized.dynamic
    kinds = {type(m) for m in int8.module.modules() if isinstance(m, (qd.Linear, qd.LSTM))}
    assert kinds == {qd.LSTM, qd.Linear} and int8.quantized_layers == 5  # inp, lstm, static, 2 head
    assert variants["fp32"].state_dict_bytes / int8.state_dict_bytes >= 3.5


def test_int8_mlp_policy_is_at_least_3_5x_smaller():
    policy = MLPPolicy(obs_dim=60 * 12, hidden=128)  # a flattened 60-bar window
    variants = quantize_variants(policy, (torch.randn(4, 60 * 12),), precisions=("fp32", "int8"))
    assert state_dict_bytes(policy) / variants["int8"].state_dict_bytes >= 3.5


def test_half_precisions_halve_the_weights(lstm_variants):
    model, variants = lstm_variants
    for p in ("fp16", "bf16"):
        v = variants[p]
        if isinstance(v, Variant):
            ratio = state_dict_bytes(model) / v.state_dict_bytes
            assert 1.8 < ratio < 2.1


def test_unsupported_precision_is_reported_with_its_reason():
    class NoHalfLSTM(nn.Module):
        """Refuses reduced precision the way bf16 autocast on nn.LSTM does on some CPUs."""

        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(3, 4, batch_first=True)

        def forward(self, x):
            if x.dtype != torch.float32:
                raise RuntimeError(f"LSTM not implemented for {x.dtype}")
            return self.lstm(x)[0]

    variants = quantize_variants(NoHalfLSTM(), (torch.randn(2, 5, 3),))
    assert isinstance(variants["fp32"], Variant) and isinstance(variants["int8"], Variant)
    for p in ("fp16", "bf16"):
        assert isinstance(variants[p], Unsupported)
        assert "not implemented" in variants[p].reason and "RuntimeError" in variants[p].reason


def test_a_layer_whose_weight_is_read_directly_stays_fp32():
    class ReadsWeight(nn.Module):
        def __init__(self):
            super().__init__()
            self.used = nn.Linear(8, 8)
            self.lift = nn.Linear(8, 4)

        def forward(self, x):
            return nn.functional.linear(self.used(x), self.lift.weight, self.lift.bias)

    model = ReadsWeight().eval()
    int8 = quantize_variants(model, (torch.randn(2, 8),), precisions=("int8",))["int8"]
    assert isinstance(int8, Variant), int8
    assert int8.quantized_layers == 1 and "kept fp32: lift" in int8.notes
    assert isinstance(int8.module.lift, nn.Linear) and int8.module.lift.weight.dtype == torch.float32


def test_model_without_quantizable_layers_reports_int8_unsupported():
    conv = nn.Sequential(nn.Conv1d(2, 2, 3), nn.ReLU())
    variants = quantize_variants(conv, (torch.randn(2, 2, 8),), precisions=("fp32", "int8"))
    assert isinstance(variants["int8"], Unsupported)
    assert "no Linear" in variants["int8"].reason


def test_int8_on_a_non_cpu_device_is_reported_not_raised():
    variants = quantize_variants(MLPPolicy(), (torch.randn(2, 64),), precisions=("int8",), device="meta")
    assert isinstance(variants["int8"], Unsupported)
    assert "CPU-only" in variants["int8"].reason


def test_unknown_precision_is_an_error():
    with pytest.raises(ValueError, match="int4"):
        quantize_variants(MLPPolicy(), (torch.randn(2, 64),), precisions=("int4",))


def test_pinball_loss_matches_the_definition():
    pred = torch.tensor([[[0.0, 1.0]]])
    target = torch.tensor([[0.5]])
    # q=0.1: err=+0.5 -> 0.05; q=0.9: err=-0.5 -> (0.9-1)*-0.5 = 0.05
    assert float(pinball_loss(pred, target, [0.1, 0.9])) == pytest.approx(0.05)


def test_compare_variant_reports_metric_change_and_output_distance():
    x = (torch.ones(3, 2),)
    cmp = compare_variant(lambda a: a * 2, lambda a: a * 2 + 0.5, x, lambda out: float(out.sum()))
    assert cmp["metric_reference"] == 12.0 and cmp["metric_variant"] == 15.0
    assert cmp["metric_rel_change"] == pytest.approx(0.25)
    assert cmp["max_abs_diff"] == pytest.approx(0.5)
    assert cmp["rel_output_diff"] == pytest.approx(0.25)


def test_forecaster_evaluation_rows_and_tolerance(lstm_variants):
    model, variants = lstm_variants
    inputs = forecaster_inputs(16, seed=3)
    with torch.inference_mode():
        targets = model(*inputs)[..., 4] + 0.5 * torch.randn(16, 5, generator=torch.Generator().manual_seed(1))
    rows = evaluate_forecaster_variants(
        variants, inputs, targets, quantiles=QUANTILES, latency_batches=(1, 4), latency_repeats=1
    )
    by_p = {r["precision"]: r for r in rows}
    assert by_p["fp32"]["metric_rel_change"] == 0.0 and by_p["fp32"]["accepted"]
    int8 = by_p["int8"]
    for key in ("latency_ms_b1", "latency_ms_b4", "state_dict_bytes", "size_ratio", "max_abs_diff"):
        assert int8[key] > 0
    assert int8["accepted"] == (int8["metric_rel_change"] <= 0.05)
    assert all(isinstance(v, (str, int, float, bool)) for r in rows for v in r.values())
    strict = evaluate_forecaster_variants(
        variants, inputs, targets, quantiles=QUANTILES, latency_batches=(1,), latency_repeats=1,
        tolerance=Tolerance(max_rel_loss_increase=-1.0),
    )
    assert not any(r["accepted"] for r in strict if r["precision"] != "fp32")


def test_agent_evaluation_measures_action_agreement_and_sharpe():
    torch.manual_seed(0)
    policy = MLPPolicy().eval()
    variants = quantize_variants(policy, (torch.randn(8, 64),))
    obs = torch.randn(400, 64, generator=torch.Generator().manual_seed(2))
    returns = np.random.default_rng(0).normal(0, 1e-3, 400)
    rows = evaluate_agent_variants(variants, (obs,), returns, cost=1e-5, latency_batches=(1,), latency_repeats=1)
    by_p = {r["precision"]: r for r in rows}
    assert by_p["fp32"]["action_agreement"] == 1.0 and by_p["fp32"]["sharpe_delta"] == 0.0
    for r in rows:
        if r["supported"]:
            assert 0.0 <= r["action_agreement"] <= 1.0
            assert r["accepted"] == (r["action_agreement"] >= 0.95)


def test_position_pnl_charges_costs_on_position_changes():
    returns = np.full(10, 1e-3) + np.tile([1e-4, -1e-4], 5)
    always_long = sharpe_ratio(position_pnl(np.ones(10), returns), 1)
    flipping = sharpe_ratio(position_pnl(np.tile([1.0, 0.0], 5), returns, cost=2e-3), 1)
    assert always_long > 0 > flipping
    np.testing.assert_allclose(position_pnl([1.0, 0.0, -1.0], [0.1, 0.2, 0.3], cost=0.01),
                               [0.1 - 0.01, -0.01, -0.3 - 0.01])


def _row(precision, size, ratio_b32, b1_ms, accepted=True, supported=True):
    return {
        "precision": precision, "supported": supported, "accepted": accepted, "reason": "ok",
        "state_dict_bytes": size, "latency_ms_b1": b1_ms, "latency_ms_b32": ratio_b32 * 10,
        "latency_ratio_b32": ratio_b32,
    }


def test_recommend_picks_the_smallest_accepted_variant_that_meets_latency():
    rows = [
        _row("fp32", 4000, 1.0, 1.0),
        _row("int8", 1000, 1.4, 1.3),
        _row("fp16", 2000, 20.0, 9.0),
        {"precision": "bf16", "supported": False, "accepted": False, "reason": "not supported here: x"},
    ]
    precision, reason = recommend(rows)
    assert precision == "int8"
    assert "4.00x smaller" in reason and "fp16" in reason and "too slow" in reason and "bf16" in reason
    # with no latency budget, int8's 1.4x slowdown disqualifies it too
    precision, reason = recommend(rows, Tolerance(latency_budget_ms=None))
    assert precision == "fp32" and "int8" in reason


def test_recommend_falls_back_to_fp32_when_nothing_is_accepted():
    rows = [_row("fp32", 4000, 1.0, 1.0), _row("int8", 1000, 1.0, 1.0, accepted=False)]
    precision, reason = recommend(rows)
    assert precision == "fp32" and "int8 rejected" in reason


def test_batch_of_tiles_to_the_requested_size():
    x = forecaster_inputs(3)
    b = batch_of(x, 7)
    assert [t.shape[0] for t in b] == [7, 7, 7]
    assert torch.equal(b[1][3], x[1][0])
