"""Mamba-2: the chunked SSD scan is the recurrence it claims to be, the model is causal,
its recurrent and parallel paths agree, and it learns."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from models.mamba2.mixer import Mamba2Mixer, RMSNormGated, balanced_chunk
from models.mamba2.model import Mamba2Backbone, Mamba2Config, Mamba2Forecaster
from models.mamba2.ssd import ssd_chunked, ssd_sequential
from models.windows import DEFAULT_QUANTILES
from tests.model_data import synthetic_training_data

S, F, K, T, H = 3, 4, 2, 12, 5


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _config(**kw) -> Mamba2Config:
    base = dict(n_static=S, n_observed=F, n_known=K, lookback=T, horizon=H, hidden=16,
                n_layers=2, d_state=8, headdim=8, chunk_size=4, dropout=0.0)
    return Mamba2Config(**{**base, **kw})


def _model(dtype=torch.float64, seed=0, **kw) -> Mamba2Forecaster:
    torch.manual_seed(seed)
    return Mamba2Forecaster(_config(**kw)).to(dtype).eval()


def _inputs(b=3, t=T, dtype=torch.float64, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, S, generator=g, dtype=dtype),
            torch.randn(b, t, F, generator=g, dtype=dtype),
            torch.randn(b, t + H, K, generator=g, dtype=dtype))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


# --- the scan ------------------------------------------------------------------


@pytest.mark.parametrize(("length", "chunk", "groups", "heads"), [
    (64, 16, 1, 4),   # multiple of the chunk
    (61, 16, 1, 4),   # not a multiple: padded last chunk
    (7, 3, 2, 4),     # groups share B, C between heads
    (5, 8, 1, 2),     # shorter than one chunk
    (1, 1, 1, 1),
    (100, 32, 1, 3),
])
def test_chunked_scan_equals_sequential_recurrence(length, chunk, groups, heads):
    g = torch.Generator().manual_seed(length * 31 + chunk)
    bsz, p, n = 2, 5, 6
    x = torch.randn(bsz, length, heads, p, generator=g, dtype=torch.float64)
    a = -torch.rand(bsz, length, heads, generator=g, dtype=torch.float64) * 2
    b = torch.randn(bsz, length, groups, n, generator=g, dtype=torch.float64)
    c = torch.randn(bsz, length, groups, n, generator=g, dtype=torch.float64)
    dt = torch.rand(bsz, length, heads, generator=g, dtype=torch.float64) + 0.1
    d = torch.randn(heads, generator=g, dtype=torch.float64)
    init = torch.randn(bsz, heads, p, n, generator=g, dtype=torch.float64)
    for state0, kw in ((None, {}), (init, {}), (init, {"dt": dt, "d": d})):
        y, final = ssd_chunked(x, a, b, c, chunk, state0, **kw)
        y_ref, final_ref = ssd_sequential(x, a, b, c, state0, **kw)
        assert y.shape == y_ref.shape == (bsz, length, heads, p)
        assert _rel(y, y_ref) < 1e-6
        assert _rel(final, final_ref) < 1e-6
    # dt scales the input, exactly as if x had been multiplied by it
    torch.testing.assert_close(ssd_chunked(x, a, b, c, chunk, dt=dt)[0],
                               ssd_chunked(x * dt[..., None], a, b, c, chunk)[0])


def test_sequential_reference_is_the_textbook_recurrence():
    """Guard the reference itself: one head, one step at a time with plain matrices."""
    g = torch.Generator().manual_seed(0)
    length, p, n = 6, 3, 4
    x = torch.randn(1, length, 1, p, generator=g, dtype=torch.float64)
    a = -torch.rand(1, length, 1, generator=g, dtype=torch.float64)
    b = torch.randn(1, length, 1, n, generator=g, dtype=torch.float64)
    c = torch.randn(1, length, 1, n, generator=g, dtype=torch.float64)
    dt = torch.rand(1, length, 1, generator=g, dtype=torch.float64)
    d = torch.tensor([0.7], dtype=torch.float64)
    h = torch.zeros(p, n, dtype=torch.float64)
    expected = []
    for t in range(length):
        h = float(torch.exp(a[0, t, 0])) * h + float(dt[0, t, 0]) * torch.outer(x[0, t, 0],
                                                                                b[0, t, 0])
        expected.append(h @ c[0, t, 0] + 0.7 * x[0, t, 0])
    y, _ = ssd_sequential(x, a, b, c, dt=dt, d=d)
    torch.testing.assert_close(y[0, :, 0], torch.stack(expected))


def test_chunked_scan_rejects_bad_shapes():
    x = torch.zeros(1, 4, 2, 3)
    with pytest.raises(ValueError, match="chunk_size"):
        ssd_chunked(x, torch.zeros(1, 4, 2), torch.zeros(1, 4, 1, 5), torch.zeros(1, 4, 1, 5), 0)
    with pytest.raises(ValueError, match="a and dt must be"):
        ssd_chunked(x, torch.zeros(1, 3, 2), torch.zeros(1, 4, 1, 5), torch.zeros(1, 4, 1, 5), 2)
    with pytest.raises(ValueError, match="heads % groups"):
        ssd_chunked(x, torch.zeros(1, 4, 2), torch.zeros(1, 4, 3, 5), torch.zeros(1, 4, 3, 5), 2)


def test_balanced_chunk_keeps_chunk_count_and_pads_least():
    for length in range(1, 300):
        for chunk in (1, 4, 32, 64):
            got = balanced_chunk(length, chunk)
            assert got <= chunk
            assert -(-length // got) == -(-length // chunk)  # same number of chunks
    assert balanced_chunk(65, 64) == 33


# --- block components -------------------------------------------------------------


def test_gated_rmsnorm_gates_and_normalises():
    torch.manual_seed(0)
    norm = RMSNormGated(8).double()
    x, z = torch.randn(4, 8, dtype=torch.float64), torch.randn(4, 8, dtype=torch.float64)
    out = norm(x, z)
    torch.testing.assert_close(norm(3.0 * x, z), out, rtol=1e-4, atol=1e-4)  # scale of x: no
    assert not torch.allclose(norm(x, z + 1.0), out)  # the gate does
    torch.testing.assert_close(out.pow(2).mean(-1), torch.ones(4, dtype=torch.float64),
                               atol=1e-4, rtol=0)
    # the fused "norm then bias-free projection" equals doing them in turn
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    proj = torch.nn.Linear(8, 3, bias=False).double()
    torch.testing.assert_close(norm.project(x, z, proj), proj(norm(x, z)))


@pytest.mark.parametrize("length", [1, 2, 3, 23])
def test_mixer_continues_from_carried_state(length):
    """forward(u) == forward(u[:k]) then forward(u[k:], state) == step by step."""
    torch.manual_seed(0)
    mixer = Mamba2Mixer(12, d_state=6, d_conv=4, expand=2, headdim=8, ngroups=3,
                        chunk_size=5).double()
    u = torch.randn(2, length, 12, dtype=torch.float64)
    full, (conv_f, ssm_f) = mixer.forward_with_state(u)
    if length > 1:
        cut = length // 2
        first, state = mixer.forward_with_state(u[:, :cut])
        second, (conv_s, ssm_s) = mixer.forward_with_state(u[:, cut:], state)
        torch.testing.assert_close(torch.cat([first, second], 1), full)
        torch.testing.assert_close(ssm_s, ssm_f)
        torch.testing.assert_close(conv_s, conv_f)
    state = mixer.initial_state(2, u.device, u.dtype)
    steps = []
    for t in range(u.shape[1]):
        y, state = mixer.step(u[:, t], state)
        steps.append(y)
    torch.testing.assert_close(torch.stack(steps, 1), full)
    torch.testing.assert_close(state[1], ssm_f)


@pytest.mark.parametrize(("batch", "length", "tokens"), [(2, 37, 10), (7, 5, 12), (5, 9, 30)])
def test_backbone_blocks_are_exact(batch, length, tokens):
    """Scanning in blocks of rows and time segments (the CPU cache optimisation) changes
    neither the outputs nor the final states."""
    torch.manual_seed(0)
    whole = Mamba2Backbone(_config(segment_tokens=0)).double().eval()
    split = Mamba2Backbone(_config(segment_tokens=tokens)).double().eval()
    split.load_state_dict(whole.state_dict())
    assert split.blocks(batch, length) != (batch, length)
    x = torch.randn(batch, length, 16, dtype=torch.float64)
    out, states = split.forward_with_state(x)
    ref, ref_states = whole.forward_with_state(x)
    torch.testing.assert_close(out, ref)
    for (conv, ssm), (conv_ref, ssm_ref) in zip(states, ref_states, strict=True):
        torch.testing.assert_close(conv, conv_ref)
        torch.testing.assert_close(ssm, ssm_ref)


# --- the forecaster -------------------------------------------------------------------


def test_backbone_is_causal():
    torch.manual_seed(0)
    backbone = Mamba2Backbone(_config()).double().eval()
    x = torch.randn(2, 30, 16, dtype=torch.float64)
    base = backbone(x)
    for t in (0, 7, 17, 28):
        changed = x.clone()
        changed[:, t + 1 :] += torch.randn_like(changed[:, t + 1 :]) * 5
        out = backbone(changed)
        torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1], rtol=0, atol=1e-12)
        assert (out[:, t + 1 :] - base[:, t + 1 :]).abs().max() > 1e-3


def test_horizon_h_only_sees_known_inputs_up_to_its_step():
    model = _model()
    static, observed, known = _inputs()
    base = model(static, observed, known)
    for h in range(H - 1):
        changed = known.clone()
        changed[:, T + h + 1 :] += 3.0  # known inputs of later horizons
        out = model(static, observed, changed)
        torch.testing.assert_close(out[:, : h + 1], base[:, : h + 1], rtol=0, atol=1e-12)
        assert (out[:, h + 1 :] - base[:, h + 1 :]).abs().max() > 1e-6


def test_every_input_moves_the_forecast():
    """No dead context (LEGACY failure 3): static, history and future known inputs all matter."""
    model = _model()
    static, observed, known = _inputs()
    base = model(static, observed, known)
    for changed in ((static + 1, observed, known), (static, observed.flip(1), known),
                    (static, observed, known * 2)):
        assert (model(*changed) - base).abs().max() > 1e-6


def test_recurrent_path_equals_parallel_path():
    model = _model(chunk_size=5)
    static, observed, known = _inputs(t=23)
    torch.testing.assert_close(model.forward_recurrent(static, observed, known),
                               model(static, observed, known))


@pytest.mark.parametrize("batch", [1, 2, 7, 32, 256])
def test_batch_sizes(batch):
    model = _model(dtype=torch.float32)
    inputs = _inputs(b=batch, dtype=torch.float32)
    with torch.no_grad():
        out = model(*inputs)
    assert out.shape == (batch, H, len(DEFAULT_QUANTILES))
    assert torch.isfinite(out).all()
    # rows do not interact: a window's forecast is the same alone as in a batch
    with torch.no_grad():
        alone = model(*(x[-1:] for x in inputs))
    torch.testing.assert_close(alone, out[-1:], rtol=1e-4, atol=1e-5)


def test_quantiles_never_cross():
    model = _model(dtype=torch.float32)
    with torch.no_grad():
        for scale in (1.0, 100.0):
            out = model(*(x * scale for x in _inputs(b=64, dtype=torch.float32)))
            assert (out.diff(dim=-1) >= 0).all()


def test_any_history_length():
    model = _model(dtype=torch.float32)
    for t in (1, 3, 50):
        with torch.no_grad():
            assert model(*_inputs(b=2, t=t, dtype=torch.float32)).shape == (2, H, 9)


def test_gradients_reach_every_parameter():
    model = _model(dtype=torch.float32, dropout=0.1, n_static=S).train()
    static, observed, known = _inputs(b=8, dtype=torch.float32)
    model(static, observed, known).square().mean().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing, missing


def test_bad_inputs_name_the_argument():
    model = _model(dtype=torch.float32)
    static, observed, known = _inputs(dtype=torch.float32)
    with pytest.raises(ValueError, match="observed"):
        model(static, observed[..., :-1], known)
    with pytest.raises(ValueError, match="static"):
        model(static[:, :-1], observed, known)
    with pytest.raises(ValueError, match=r"known must be \[3, T \+ H"):
        model(static, observed, known[:, :-1])


def test_head_width_defaults_to_mamba2s_64_where_it_divides():
    assert _config(headdim=None, hidden=64).head_dim == 64
    assert _config(headdim=None, hidden=16).head_dim == 32  # inner width 32
    assert _config(headdim=None, hidden=48).head_dim == 32  # inner width 96
    assert _config(headdim=None, hidden=48).n_heads == 3


def test_config_round_trip_and_validation():
    cfg = _config(quantiles=(0.05, 0.5, 0.95), ngroups=2, kernel="auto")
    again = Mamba2Config.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg
    assert isinstance(again.quantiles, tuple)
    with pytest.raises(ValueError, match="unknown field"):
        Mamba2Config.from_dict({**cfg.to_dict(), "heads": 4})
    for bad, field_name in [({"headdim": 7}, "headdim"), ({"ngroups": 3}, "ngroups"),
                            ({"quantiles": (0.5, 0.1)}, "quantiles"), ({"chunk_size": 0},
                            "chunk_size"), ({"kernel": "cuda"}, "kernel"),
                            ({"dropout": 1.0}, "dropout"), ({"n_observed": 0}, "n_observed")]:
        with pytest.raises(ValueError, match=field_name):
            _config(**bad)


def test_registry_builds_it_from_a_checkpoint_config():
    from models.registry import build_model, model_type_of

    model = build_model("mamba2", _config().to_dict())
    assert isinstance(model, Mamba2Forecaster)
    assert model_type_of(model) == "mamba2"


# --- learning -------------------------------------------------------------------------


def test_learns_beyond_climatology():
    """LEGACY failure 2 (a loss that never moved): beat the unconditional quantiles."""
    from models.training.loop import (
        TrainConfig,
        climatology_quantiles,
        predict_quantiles,
        quantile_loss_of,
        scaled_targets,
        train_forecaster,
    )

    data = synthetic_training_data(n_rows={"train": 3000, "validation": 800}, n_observed=4,
                                   n_known=3, n_static=2, lookback=12, signal=0.5, seed=0)
    torch.manual_seed(0)
    model = Mamba2Forecaster(Mamba2Config(
        n_static=2, n_observed=4, n_known=3, lookback=12, horizon=5, hidden=16, n_layers=1,
        d_state=8, headdim=8, chunk_size=8, dropout=0.0))
    cfg = TrainConfig(epochs=4, batch_size=64, lr=1e-2, patience=None, num_threads=1, seed=0)
    result = train_forecaster(model, data, cfg)
    val = data.window_dataset("validation")
    targets = scaled_targets(val)
    q = model.config.quantiles
    clim = climatology_quantiles(data)
    preds = predict_quantiles(model, val)
    assert np.isfinite(preds).all() and (np.diff(preds, axis=-1) >= 0).all()
    model_loss = quantile_loss_of(preds, targets, q)
    assert model_loss == pytest.approx(result.best_val_loss, rel=1e-4)
    assert model_loss < 0.97 * quantile_loss_of(clim, targets, q), result.history
    # the gain is where the signal is: horizon 1
    assert quantile_loss_of(preds[:, :1], targets[:, :1], q) < 0.92 * quantile_loss_of(
        clim[:1], targets[:, :1], q)


# --- CUDA ----------------------------------------------------------------------------------


@pytest.mark.gpu
def test_cuda_batch_32_matches_cpu():
    """LEGACY failure 1 (a norm that broke on the GPU at batch 32)."""
    model = _model(dtype=torch.float32)
    inputs = _inputs(b=32, dtype=torch.float32)
    with torch.no_grad():
        cpu = model(*inputs)
        gpu = model.cuda()(*(x.cuda() for x in inputs)).cpu()
    torch.testing.assert_close(gpu, cpu, rtol=1e-3, atol=1e-4)


@pytest.mark.gpu
def test_fused_kernel_matches_pure_scan():
    pytest.importorskip("mamba_ssm", reason="mamba_ssm not installed")
    pure = _model(dtype=torch.float32, chunk_size=16).cuda()
    fused = _model(dtype=torch.float32, chunk_size=16, kernel="auto").cuda()
    fused.load_state_dict(pure.state_dict())
    inputs = tuple(x.cuda() for x in _inputs(b=4, t=60, dtype=torch.float32))
    with torch.no_grad():
        torch.testing.assert_close(fused(*inputs), pure(*inputs), rtol=1e-3, atol=1e-3)
