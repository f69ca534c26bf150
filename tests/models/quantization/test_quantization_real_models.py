"""The project's own models through quantize_variants and export (small sizes, CPU)."""

from __future__ import annotations

import warnings

import pytest
import torch

from models.agents.policy import PolicyNet
from models.export import export_artifact, load_artifact
from models.mamba2.model import Mamba2Config, Mamba2Forecaster
from models.quantization import OUTPUT_TOLERANCE, Unsupported, Variant, quantize_variants
from models.tft.model import TemporalFusionTransformer, TFTConfig
from tests.quant_standins import forecaster_inputs

qd = torch.ao.nn.quantized.dynamic


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _tft():
    return TemporalFusionTransformer(TFTConfig(n_static=5, n_observed=12, n_known=10, hidden=16, heads=2))


def _mamba2():
    return Mamba2Forecaster(Mamba2Config(n_static=5, n_observed=12, n_known=10, hidden=16, headdim=8, d_state=8))


def _policy(kind):
    return PolicyNet({"lookback": 60, "n_channels": 4, "kind": kind, "hidden": 32}, [32, 32], "relu", algo="dqn")


def _obs(batch, seed=0):
    return (torch.randn(batch, 60 * 4 + 3, generator=torch.Generator().manual_seed(seed)),)


CASES = {
    "tft": (_tft, lambda b, s=0: forecaster_inputs(b, seed=s)),
    "mamba2": (_mamba2, lambda b, s=0: forecaster_inputs(b, seed=s)),
    "policy_mlp": (lambda: _policy("mlp"), _obs),
    "policy_conv": (lambda: _policy("conv"), _obs),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    make, inputs = CASES[request.param]
    torch.manual_seed(0)
    model = make().eval()
    return request.param, model, inputs, quantize_variants(model, inputs(4))


def test_variants_stay_within_tolerance_of_fp32(case):
    name, model, inputs, variants = case
    fixed = inputs(16, 5)
    with torch.inference_mode():
        ref = model(*fixed)
    assert isinstance(variants["fp32"], Variant) and isinstance(variants["int8"], Variant)
    for precision, v in variants.items():
        if isinstance(v, Unsupported):
            assert v.reason
            continue
        with torch.inference_mode():
            out = v.module(*fixed)
        rel = float((out - ref).abs().max() / ref.abs().max())
        assert rel <= OUTPUT_TOLERANCE[precision], f"{name} {precision}: {rel:.3g}"


def test_int8_quantizes_the_recurrent_and_linear_layers(case):
    name, _, _, variants = case
    int8 = variants["int8"].module
    kinds = {type(m) for m in int8.modules() if isinstance(m, (qd.Linear, qd.LSTM))}
    assert qd.Linear in kinds
    if name == "tft":
        assert qd.LSTM in kinds  # encoder and decoder


def test_int8_artifact_reproduces_the_variant(case, tmp_path):
    name, _, inputs, variants = case
    int8 = variants["int8"].module
    path = export_artifact(int8, inputs(4), tmp_path / name, metadata={"model": name, "precision": "int8"})
    fn, meta = load_artifact(path)
    assert meta["format"] == "torchscript"
    for b in (1, 7):
        x = inputs(b, 20 + b)
        with torch.inference_mode():
            assert torch.allclose(fn(*x), int8(*x), atol=1e-5), (name, b)


def test_policy_fp32_artifact_uses_torch_export(tmp_path):
    policy = _policy("mlp").eval()
    fn, meta = load_artifact(export_artifact(policy, _obs(4), tmp_path / "p", metadata={}))
    assert meta["format"] == "torch.export"
    x = _obs(7, 3)
    assert torch.equal(fn(*x).argmax(1), policy(*x).argmax(1))


@pytest.mark.slow
def test_mamba2_bf16_artifact_matches_eager_across_its_segmented_scan(tmp_path):
    """Batch 64 takes Mamba-2's segmented CPU scan in eager, not in the artifact traced at
    batch 4: the two agree to bf16 rounding, and the artifact is kept."""
    torch.manual_seed(0)
    model = _mamba2().eval()
    bf16 = quantize_variants(model, forecaster_inputs(4), precisions=("bf16",))["bf16"]
    fn, meta = load_artifact(export_artifact(bf16.module, forecaster_inputs(4), tmp_path / "m", metadata={}))
    assert meta["format"] == "torch.export"
    x = forecaster_inputs(64, seed=9)
    with torch.inference_mode():
        ref = model(*x)
        rel = float((fn(*x) - ref).abs().max() / ref.abs().max())
    assert rel <= OUTPUT_TOLERANCE["bf16"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_half_variants_keep_cudnn_weights_compact():
    """Copied / cast CUDA LSTMs re-packed their weights on every call (cuDNN warns). Not
    bf16: torch's ``flatten_parameters`` refuses bf16 weights (``cudnn.is_acceptable``),
    although cuDNN then runs the bf16 LSTM (H200, torch 2.11: it still warns)."""
    torch.manual_seed(0)
    variants = quantize_variants(_tft().eval(), forecaster_inputs(4), device="cuda",
                                 precisions=("fp32", "fp16"))
    x = tuple(t.cuda() for t in forecaster_inputs(32))
    for precision, v in variants.items():
        assert isinstance(v, Variant), (precision, v)
        with warnings.catch_warnings(record=True) as seen, torch.inference_mode():
            warnings.simplefilter("always")
            v.module(*x)
        assert not [w for w in seen if "contiguous chunk" in str(w.message)], precision
