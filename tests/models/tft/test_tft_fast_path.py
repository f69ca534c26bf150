"""The TFT's inference fast path computes what the reference (training) path computes.

``reference_forward`` below is the forward pass as it stood before the fast path was
added, written out functionally from the model's parameters, op for op (GLU as chunk /
sigmoid / multiply, the per-variable norm as mean / square / rsqrt, ``masked_fill`` on a
freshly built causal mask), so the fast path is checked against an independent copy of
the old computation, not against itself.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from models.tft.layers import causal_mask
from models.tft.model import TemporalFusionTransformer, TFTConfig

SMALL = dict(n_static=3, n_observed=7, n_known=4, lookback=12, horizon=3, hidden=16, heads=2)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _inputs(cfg: TFTConfig, batch: int, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    t = cfg.lookback
    return (torch.randn(batch, cfg.n_static, generator=g),
            torch.randn(batch, t, cfg.n_observed, generator=g),
            torch.randn(batch, t + cfg.horizon, cfg.n_known, generator=g))


def _model(seed: int = 0, **overrides) -> TemporalFusionTransformer:
    torch.manual_seed(seed)
    model = TemporalFusionTransformer(TFTConfig(**{**SMALL, **overrides})).eval()
    with torch.no_grad():  # move every parameter off its init (norm gains of 1, zero biases)
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


# --- the old forward, functionally -------------------------------------------------


def _glu(glu, x):
    value, gate = F.linear(x, glu.proj.weight, glu.proj.bias).chunk(2, dim=-1)
    return torch.sigmoid(gate) * value


def _grn(grn, a, context=None):
    hidden = F.linear(a, grn.fc_in.weight, grn.fc_in.bias)
    if context is not None:
        hidden = hidden + F.linear(context, grn.fc_context.weight)
    if grn.skip is None:
        residual = a
    elif isinstance(grn.skip, torch.nn.Linear):
        residual = F.linear(a, grn.skip.weight, grn.skip.bias)
    else:  # per-variable affine
        residual = a * grn.skip.scale + grn.skip.shift
    n = grn.norm
    return F.layer_norm(residual + _glu(grn.glu, F.elu(hidden)), n.normalized_shape,
                        n.weight, n.bias, n.eps)


def _vsn(vsn, x, context=None):
    weights = torch.softmax(_grn(vsn.selector, x, context), dim=-1)
    flat_x, flat_w = x.reshape(-1, vsn.n_vars), weights.reshape(-1, vsn.n_vars)
    xv = flat_x.t().unsqueeze(1)
    emb = vsn.embed_bias + xv * vsn.embed_weight
    hidden = F.elu(vsn.pre_bias + xv * vsn.pre_weight)
    gated = F.glu(vsn.glu_bias + torch.bmm(vsn.glu_weight, hidden), dim=1)
    y = emb + gated
    centred = y - y.mean(dim=1, keepdim=True)
    normed = centred * torch.rsqrt(centred.square().mean(dim=1, keepdim=True) + 1e-5)
    weighted = normed * flat_w.t().unsqueeze(1)
    lifted = F.linear(weighted.reshape(-1, flat_x.shape[0]).t(), vsn.lift.weight, vsn.lift.bias)
    return (lifted + flat_w @ vsn.lift_bias).reshape(*x.shape[:-1], -1)


def _gate_add_norm(gan, x, skip):
    n = gan.norm
    return F.layer_norm(skip + _glu(gan.glu, x), n.normalized_shape, n.weight, n.bias, n.eps)


def _static_encoders(enc, a):
    hidden = F.elu(F.linear(a, enc.fc_in.weight, enc.fc_in.bias))
    hidden = hidden.view(a.shape[0], enc.n, enc.d).transpose(0, 1)
    gated = F.glu(torch.baddbmm(enc.glu_bias, hidden, enc.glu_weight), -1)
    out = F.layer_norm(a + gated, (enc.d,)) * enc.norm_weight + enc.norm_bias
    return out.unbind(0)


def _attention(att, query, key, mask):
    b, tq, _ = query.shape
    q = F.linear(query, att.q.weight, att.q.bias).view(b, tq, att.heads, att.d_head)
    k = F.linear(key, att.k.weight, att.k.bias).view(b, key.shape[1], att.heads, att.d_head)
    scores = q.transpose(1, 2) @ k.transpose(1, 2).transpose(-1, -2) / math.sqrt(att.d_head)
    attn = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
    values = F.linear(key, att.v.weight, att.v.bias)
    return F.linear(attn.mean(dim=1) @ values, att.out.weight, att.out.bias)


def reference_forward(model: TemporalFusionTransformer, static, observed, known):
    c = model.config
    b, t = observed.shape[:2]
    static_emb = _vsn(model.static_vsn, static.unsqueeze(1)).squeeze(1)
    ctx_select, ctx_enrich, ctx_h, ctx_c = _static_encoders(model.static_encoders, static_emb)
    h0 = ctx_h.unsqueeze(0).expand(c.lstm_layers, -1, -1).contiguous()
    c0 = ctx_c.unsqueeze(0).expand(c.lstm_layers, -1, -1).contiguous()
    past = _vsn(model.past_vsn, torch.cat([observed, known[:, :t]], -1), ctx_select.unsqueeze(1))
    future = _vsn(model.future_vsn, known[:, t:], ctx_select.unsqueeze(1))
    enc_out, state = model.encoder(past, (h0, c0))
    dec_out, _ = model.decoder(future, state)
    temporal = _gate_add_norm(model.lstm_gate, torch.cat([enc_out, dec_out], 1),
                              torch.cat([past, future], 1))
    enriched = _grn(model.enrichment, temporal, ctx_enrich.unsqueeze(1))
    query = enriched[:, t:]
    attended = _attention(model.attention, query, enriched, causal_mask(t, c.horizon))
    gated = _gate_add_norm(model.attention_gate, attended, query)
    decoded = _gate_add_norm(model.output_gate, _grn(model.positionwise, gated), temporal[:, t:])
    return model.head(decoded)


# --- tests -------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 5])
def test_fast_path_matches_the_old_forward(batch):
    model = _model()
    x = _inputs(model.config, batch, seed=batch)
    with torch.inference_mode():
        assert model._can_run_fast()
        fast = model(*x)
        ref = reference_forward(model, *x)
    assert fast.shape == (batch, model.config.horizon, len(model.config.quantiles))
    torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-5)


def test_reference_path_matches_the_old_forward():
    """With autograd on, ``forward`` takes the reference path; it too is unchanged."""
    model = _model(seed=1)
    x = _inputs(model.config, 3, seed=7)
    with torch.no_grad():
        ref = reference_forward(model, *x)
    assert not model._can_run_fast()
    out = model(*x)
    assert out.requires_grad
    torch.testing.assert_close(out.detach(), ref, rtol=1e-5, atol=1e-5)


def test_fast_path_runs_in_row_chunks_like_the_reference(monkeypatch):
    """Past the chunk size the per-variable work is split into row chunks: same result."""
    import models.tft.layers as tft_layers

    model = _model(seed=2)
    x = _inputs(model.config, 4, seed=3)
    with torch.inference_mode():
        whole = model(*x)
        monkeypatch.setattr(tft_layers, "CHUNK_ELEMENTS", 8 * model.config.var_width * 2 * 14)
        chunked = model(*x)
        ref = reference_forward(model, *x)
    torch.testing.assert_close(chunked, whole, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(chunked, ref, rtol=1e-5, atol=1e-5)


def test_fast_path_sees_a_parameter_change():
    """Nothing derived from the weights is cached: a loaded state dict takes effect."""
    a, b = _model(seed=0), _model(seed=5)
    x = _inputs(a.config, 2, seed=11)
    with torch.inference_mode():
        before = a(*x)
        a.load_state_dict(b.state_dict())
        after = a(*x)
        ref_b = b(*x)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, ref_b, rtol=0, atol=0)


def test_fast_path_is_only_taken_for_inference():
    model = _model()
    model.train()
    with torch.inference_mode():
        assert not model._can_run_fast()  # dropout must apply
    model.eval()
    assert not model._can_run_fast()  # autograd must see the reference graph
    with torch.no_grad():
        assert model._can_run_fast()


def test_fast_path_calls_hooked_layers_as_modules():
    """int8 quantization finds the layers to swap by forward pre-hooks: the fast path
    must still call a hooked Linear (the quantized replacement is called the same way)."""
    model = _model()
    seen: list[str] = []
    for name, layer in model.named_modules():
        if isinstance(layer, torch.nn.Linear) and name != "past_vsn.lift":
            layer.register_forward_pre_hook(lambda _m, _a, name=name: seen.append(name))
    with torch.inference_mode():
        model(*_inputs(model.config, 1, seed=0))
    assert {"past_vsn.selector.fc_in", "enrichment.fc_context", "attention.q",
            "lstm_gate.glu.proj", "head.proj", "static_encoders.fc_in"} <= set(seen)


def test_fast_path_without_known_or_static_inputs():
    model = _model(n_static=0, n_known=0)
    x = _inputs(model.config, 2, seed=4)
    with torch.inference_mode():
        fast = model(*x)
    with torch.no_grad():
        ref = model._run(*x, interpret=False)[0]
    torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-5)


def test_mask_cache_follows_the_lookback():
    model = _model()
    x = _inputs(model.config, 1, seed=0)
    short = (x[0], x[1][:, 4:], x[2][:, 4:])
    with torch.inference_mode():
        model(*x)
        out = model(*short)
        ref = reference_forward(model, *short)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
