import copy

import pytest
import torch

from models.tft.layers import (
    GatedLinearUnit,
    GatedResidualNetwork,
    StackedGRN,
    VariableSelectionNetwork,
    causal_mask,
)
from models.tft.model import TemporalFusionTransformer, TFTConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = dict(n_static=3, n_observed=6, n_known=4, lookback=12, horizon=5, hidden=16, heads=2,
             lstm_layers=2, var_width=4)


def _inputs(cfg: TFTConfig, batch: int, seed: int = 0, lookback: int | None = None):
    g = torch.Generator().manual_seed(seed)
    t = lookback or cfg.lookback
    return (torch.randn(batch, cfg.n_static, generator=g),
            torch.randn(batch, t, cfg.n_observed, generator=g),
            torch.randn(batch, t + cfg.horizon, cfg.n_known, generator=g))


@pytest.fixture
def model():
    torch.manual_seed(0)
    return TemporalFusionTransformer(TFTConfig(**SMALL)).eval()


# --- gated residual network (LEGACY failure 3) ------------------------------

def test_grn_context_changes_output():
    torch.manual_seed(0)
    grn = GatedResidualNetwork(8, 8, 8, d_context=4).eval()
    a = torch.randn(5, 8)
    out1, out2 = grn(a, torch.randn(5, 4)), grn(a, torch.randn(5, 4))
    assert not torch.allclose(out1, out2, atol=1e-4)


def test_glu_differs_for_different_inputs():
    torch.manual_seed(0)
    glu = GatedLinearUnit(8, 8).eval()
    x1, x2 = torch.randn(4, 8), torch.randn(4, 8)
    y1, y2 = glu(x1), glu(x2)
    assert not torch.allclose(y1, y2, atol=1e-4)
    assert y1.abs().sum() > 0


def test_grn_input_scale_matters():
    torch.manual_seed(0)
    grn = GatedResidualNetwork(8, 8, 8).eval()
    a = torch.randn(6, 8)
    small, large = grn(a * 0.1), grn(a * 10.0)
    assert small.abs().sum() > 0 and large.abs().sum() > 0
    assert not torch.allclose(small, large, atol=1e-3)


def test_per_variable_grns_keep_variables_independent():
    torch.manual_seed(0)
    vsn = VariableSelectionNetwork(n_vars=5, width=4, d_model=8, d_context=None, dropout=0.0)
    x = torch.randn(6, 5)
    base = vsn.process(x)  # [V, width, N]
    x2 = x.clone()
    x2[:, 2] += 1.0
    changed = (vsn.process(x2) - base).abs().amax(dim=(1, 2))
    assert changed[2] > 1e-3
    assert torch.all(changed[[0, 1, 3, 4]] == 0)


def test_variable_selection_weights_respond_to_inputs_and_context():
    torch.manual_seed(0)
    vsn = VariableSelectionNetwork(n_vars=5, width=4, d_model=8, d_context=3, dropout=0.0).eval()
    x, ctx = torch.randn(2, 7, 5), torch.randn(2, 1, 3)
    out, w = vsn(x, ctx)
    assert out.shape == (2, 7, 8) and w.shape == (2, 7, 5)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 7))
    assert not torch.allclose(vsn(x, torch.randn(2, 1, 3))[1], w, atol=1e-4)
    assert not torch.allclose(vsn(x * 3, ctx)[1], w, atol=1e-4)


# --- causal mask (LEGACY failure 4) -----------------------------------------

def test_mask_from_sequence_lengths():
    m = causal_mask(3, 2)
    assert m.shape == (2, 5)
    assert m.tolist() == [[False, False, False, False, True], [False] * 5]


def test_decoder_step_ignores_later_known_inputs(model):
    static, observed, known = _inputs(model.config, 4)
    base = model(static, observed, known)
    t = model.config.lookback
    for step in range(model.config.horizon - 1):
        perturbed = known.clone()
        perturbed[:, t + step + 1:] += torch.randn_like(perturbed[:, t + step + 1:]) * 5
        out = model(static, observed, perturbed)
        torch.testing.assert_close(out[:, : step + 1], base[:, : step + 1], rtol=0, atol=1e-5)
        assert not torch.allclose(out[:, step + 1:], base[:, step + 1:], atol=1e-4)


@pytest.mark.parametrize("lookback", [7, 16, 60])
def test_sequence_length_independent_of_hidden_size(lookback):
    torch.manual_seed(0)
    cfg = TFTConfig(**{**SMALL, "lookback": lookback, "hidden": 16})
    out = TemporalFusionTransformer(cfg).eval()(*_inputs(cfg, 2))
    assert out.shape == (2, cfg.horizon, len(cfg.quantiles))
    assert torch.isfinite(out).all()


# --- shapes, batches, gradients (LEGACY failure 1) --------------------------

@pytest.mark.parametrize("batch", [1, 2, 16, 32, 64, 256])
def test_all_batch_sizes_run(model, batch):
    with torch.inference_mode():
        out = model(*_inputs(model.config, batch))
    assert out.shape == (batch, 5, 9)
    assert torch.isfinite(out).all()
    assert (out.diff(dim=-1) >= 0).all()


def test_batch_rows_are_independent(model):
    inputs = _inputs(model.config, 8)
    full = model(*inputs)
    single = model(*(x[3:4] for x in inputs))
    torch.testing.assert_close(full[3:4], single, rtol=1e-4, atol=1e-5)


def test_every_parameter_gets_a_gradient():
    torch.manual_seed(0)
    model = TemporalFusionTransformer(TFTConfig(**SMALL)).train()
    model(*_inputs(model.config, 8)).square().mean().backward()
    missing = [n for n, p in model.named_parameters()
               if p.grad is None or not torch.isfinite(p.grad).all() or p.grad.abs().sum() == 0]
    assert missing == []


def test_interpretation_weights(model):
    out, info = model.forward_with_interpretation(*_inputs(model.config, 3))
    torch.testing.assert_close(out, model(*_inputs(model.config, 3)))
    cfg = model.config
    assert info["static_weights"].shape == (3, cfg.n_static)
    assert info["past_weights"].shape == (3, cfg.lookback, cfg.n_observed + cfg.n_known)
    assert info["future_weights"].shape == (3, cfg.horizon, cfg.n_known)
    assert info["attention"].shape == (3, cfg.horizon, cfg.lookback + cfg.horizon)
    assert info["attention_per_head"].shape == (3, cfg.heads, cfg.horizon,
                                                cfg.lookback + cfg.horizon)
    for key in ("static_weights", "past_weights", "future_weights", "attention"):
        torch.testing.assert_close(info[key].sum(-1), torch.ones(info[key].shape[:-1]))
    # attention after the query position is exactly zero
    att = info["attention"]
    for i in range(cfg.horizon):
        assert torch.all(att[:, i, cfg.lookback + i + 1:] == 0)


def test_works_without_static_or_known_inputs():
    torch.manual_seed(0)
    cfg = TFTConfig(**{**SMALL, "n_static": 0, "n_known": 0})
    out = TemporalFusionTransformer(cfg)(*_inputs(cfg, 2))
    assert out.shape == (2, 5, 9)


def test_bad_shapes_name_the_input(model):
    static, observed, known = _inputs(model.config, 2)
    with pytest.raises(ValueError, match="known"):
        model(static, observed, known[:, :-1])
    with pytest.raises(ValueError, match="observed"):
        model(static, observed[..., :-1], known)
    with pytest.raises(ValueError, match="static"):
        model(static[:, :-1], observed, known)


def test_config_round_trip_and_validation():
    import json

    cfg = TFTConfig(**SMALL)
    again = TFTConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg
    assert TFTConfig(n_static=5, n_observed=241, n_known=10).hidden == 64
    with pytest.raises(ValueError, match="heads"):
        TFTConfig(**{**SMALL, "heads": 3})
    with pytest.raises(ValueError, match="quantiles"):
        TFTConfig(**SMALL, quantiles=(0.5, 0.1))
    with pytest.raises(ValueError, match="unknown"):
        TFTConfig.from_dict({**SMALL, "hiden": 3})


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_cuda_batches_and_autocast(dtype):
    torch.manual_seed(0)
    model = TemporalFusionTransformer(TFTConfig(**SMALL)).cuda().train()
    for batch in (1, 16, 32, 256):
        inputs = [x.cuda() for x in _inputs(model.config, batch)]
        with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
            out = model(*inputs)
        out.float().mean().backward()
        assert out.shape == (batch, 5, 9)
        assert torch.isfinite(out.float()).all()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_inference_fast_path_matches_cpu():
    """The inference path (eval, no grad) on CUDA: cuDNN refused the CPU kernel's strided
    LSTM states ("hx is not contiguous"), so every GPU forecast failed."""
    torch.manual_seed(0)
    model = TemporalFusionTransformer(TFTConfig(**SMALL)).eval()
    gpu = copy.deepcopy(model).cuda()
    for batch in (1, 32, 256):
        inputs = _inputs(model.config, batch)
        with torch.no_grad():
            assert model._can_run_fast()
            cpu_out = model(*inputs)
            gpu_out = gpu(*(x.cuda() for x in inputs)).cpu()
        torch.testing.assert_close(gpu_out, cpu_out, rtol=1e-3, atol=1e-4)


def test_static_encoders_give_four_distinct_contexts():
    torch.manual_seed(0)
    enc = StackedGRN(4, 8).eval()
    a = torch.randn(3, 8)
    outs = enc(a)
    assert len(outs) == 4 and all(o.shape == (3, 8) for o in outs)
    assert not any(torch.allclose(outs[i], outs[j], atol=1e-4)
                   for i in range(4) for j in range(i + 1, 4))
    assert not torch.allclose(enc(a * 2)[0], outs[0], atol=1e-4)


# --- per-window target scaling ----------------------------------------------

def _scaled_and_plain(bars: int):
    torch.manual_seed(0)
    scaled = TemporalFusionTransformer(TFTConfig(**SMALL, output_scale_input=2,
                                                 output_scale_bars=bars)).eval()
    plain = TemporalFusionTransformer(TFTConfig(**SMALL)).eval()
    plain.load_state_dict(scaled.state_dict())
    return scaled, plain


@pytest.mark.parametrize("grad", [False, True])  # the fast path and the reference path
def test_output_scale_is_the_rms_of_the_scale_input_over_the_last_bars(grad):
    scaled, plain = _scaled_and_plain(bars=5)
    static, observed, known = _inputs(scaled.config, batch=6)
    observed[0, :, 2] = 0.0  # a window without movement gets the floor, not zero
    with torch.set_grad_enabled(grad):
        ratio = (scaled(static, observed, known) / plain(static, observed, known)).detach()
    want = torch.sqrt(observed[:, -5:, 2].square().mean(dim=1) + 0.1 ** 2)
    torch.testing.assert_close(ratio, want[:, None, None].expand_as(ratio), rtol=1e-4, atol=1e-5)
    assert ratio[0].min() == pytest.approx(0.1, rel=1e-4)


def test_output_scale_keeps_quantiles_ordered_and_interpretation_consistent():
    scaled, _ = _scaled_and_plain(bars=60)  # longer than the lookback: the whole window
    static, observed, known = _inputs(scaled.config, batch=4)
    observed[:, :, 2] *= torch.linspace(0.01, 30.0, 4)[:, None]  # calm to wild windows
    with torch.no_grad():
        out = scaled(static, observed, known)
        interpreted, _ = scaled.forward_with_interpretation(static, observed, known)
    assert (out.diff(dim=-1) >= 0).all()
    torch.testing.assert_close(interpreted, out, rtol=1e-4, atol=1e-5)
    spread = (out[..., -1] - out[..., 0]).mean(dim=1)
    assert spread[-1] > 10 * spread[0]  # a wild window gets a wider band


def test_output_scale_config_is_checked_and_old_configs_load_unscaled():
    cfg = TFTConfig.from_dict({k: v for k, v in SMALL.items()})  # a config saved before it
    assert cfg.output_scale_input is None
    with pytest.raises(ValueError, match="output_scale_input"):
        TFTConfig(**SMALL, output_scale_input=SMALL["n_observed"])
    with pytest.raises(ValueError, match="output_scale_bars"):
        TFTConfig(**SMALL, output_scale_input=0, output_scale_bars=0)
    with pytest.raises(ValueError, match="output_scale_floor"):
        TFTConfig(**SMALL, output_scale_input=0, output_scale_floor=0.0)
