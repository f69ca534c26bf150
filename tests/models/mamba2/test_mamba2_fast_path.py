"""The fast paths of the Mamba-2 scan against the code they replaced.

``reference_ssd_chunked`` is the chunked SSD scan as it stood before the single-chunk path
and the head-major rewrite (kept verbatim here, not in the library); ``reference_conv`` is
the ``F.conv1d`` the mixer used. Random inputs, float32 and float64, with and without an
initial state, ``dt`` and ``D``, several group counts, lengths either side of the
single-chunk cut-off.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from models.mamba2.mixer import Mamba2Mixer
from models.mamba2.model import Mamba2Config, Mamba2Forecaster
from models.mamba2.ssd import (
    single_chunk_length,
    ssd_chunked,
    ssd_multi_chunk,
    ssd_sequential,
    ssd_single_chunk,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def reference_ssd_chunked(
    x: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    chunk_size: int,
    initial_state: torch.Tensor | None = None,
    *,
    dt: torch.Tensor | None = None,
    d: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The scan as it was before the fast paths (the chunked listing, verbatim)."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    bsz, length, heads, headdim = x.shape
    groups, d_state = b.shape[2], b.shape[3]
    if a.shape != (bsz, length, heads) or (dt is not None and dt.shape != a.shape):
        raise ValueError(f"a and dt must be {(bsz, length, heads)}, got a {tuple(a.shape)}"
                         + ("" if dt is None else f", dt {tuple(dt.shape)}"))
    if b.shape != c.shape or b.shape[:2] != (bsz, length) or heads % groups:
        raise ValueError(
            f"b and c must be [batch, length, groups, d_state] with heads % groups == 0; "
            f"got b {tuple(b.shape)}, c {tuple(c.shape)}, heads {heads}"
        )
    skip_x = x
    if dt is not None:
        x = x * dt.unsqueeze(-1)
    pad = (-length) % chunk_size
    if pad:
        x = F.pad(x, (0, 0, 0, 0, 0, pad))
        a = F.pad(a, (0, 0, 0, pad))
        b = F.pad(b, (0, 0, 0, 0, 0, pad))
        c = F.pad(c, (0, 0, 0, 0, 0, pad))
    n_chunks = x.shape[1] // chunk_size
    r = heads // groups
    # Working layout [batch, chunk, group, step, head-in-group, ...]: for one group (the
    # default) it is a free reshape of the input, and the state products can treat
    # (head, headdim) as one matrix axis, so B and C are never copied per head.
    x = x.reshape(bsz, n_chunks, chunk_size, groups, r, headdim).transpose(2, 3)
    b = b.reshape(bsz, n_chunks, chunk_size, groups, d_state).transpose(2, 3)  # b c g l n
    c = c.reshape(bsz, n_chunks, chunk_size, groups, d_state).transpose(2, 3)
    a = a.reshape(bsz, n_chunks, chunk_size, groups, r).permute(0, 1, 3, 4, 2)  # b c g r l
    a_cumsum = torch.cumsum(a, dim=-1)
    a_cumsum_lr = a_cumsum.transpose(-1, -2).unsqueeze(-1)  # b c g l r 1

    # 1. intra-chunk (diagonal blocks): C_l . B_s * exp(sum a[s+1..l]) for s <= l.
    #    Within a chunk the cumulative sums are short, so their difference is as accurate as
    #    segsum() (the fused kernels do the same). The clamp only tames the unused upper
    #    triangle (which the causal mask on C.B zeroes): exp of large or -inf values is slow.
    scores = torch.tril(c @ b.transpose(-1, -2)).unsqueeze(3)  # b c g 1 l s
    scores = scores * torch.exp((a_cumsum.unsqueeze(-1) - a_cumsum.unsqueeze(-2)).clamp(max=0))
    y_diag = scores @ x.transpose(3, 4)  # [b c g r l s] @ [b c g r s p]

    # 2. each chunk's own contribution to the state at its end, kept as [n, (r p)] so that
    #    step 4 is a plain product (a transposed operand makes the batched GEMM ~3x slower)
    decay_to_end = torch.exp(a_cumsum_lr[..., -1:, :, :] - a_cumsum_lr)  # b c g l r 1
    xd = (x * decay_to_end).reshape(bsz, n_chunks, groups, chunk_size, r * headdim)
    chunk_states = b.transpose(-1, -2) @ xd  # b c g n (r p)

    # 3. inter-chunk recurrence: the state entering each chunk
    if initial_state is None:
        state = x.new_zeros(bsz, groups, d_state, r, headdim)
    else:  # [b, h, p, n] -> [b, g, n, r, p]
        state = initial_state.to(x.dtype).reshape(bsz, groups, r, headdim, d_state)
        state = state.permute(0, 1, 4, 2, 3)
    chunk_states = chunk_states.reshape(bsz, n_chunks, groups, d_state, r, headdim)
    chunk_decay = torch.exp(a_cumsum[..., -1]).unsqueeze(-1).unsqueeze(-3)  # b c g 1 r 1
    entering = []
    for k in range(n_chunks):
        entering.append(state)
        state = torch.addcmul(chunk_states[:, k], state, chunk_decay[:, k])
    states_in = torch.stack(entering, dim=1).reshape(bsz, n_chunks, groups, d_state, r * headdim)

    # 4. state -> output within each chunk, [b c g l (r p)], plus the diagonal blocks
    y_off = (c @ states_in).reshape(x.shape)
    y = torch.addcmul(y_diag.transpose(3, 4), y_off, torch.exp(a_cumsum_lr))  # b c g l r p
    y = y.transpose(2, 3).reshape(bsz, n_chunks * chunk_size, heads, headdim)[:, :length]
    if d is not None:
        y = torch.addcmul(y, skip_x, d.to(y.dtype)[:, None])
    return y, state.permute(0, 1, 3, 4, 2).reshape(bsz, heads, headdim, d_state)


def _inputs(bsz, length, heads, headdim, groups, d_state, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    def rnd(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype)
    dt = torch.rand(bsz, length, heads, generator=g, dtype=dtype) * 0.5 + 0.01
    a = -dt * torch.rand(heads, generator=g, dtype=dtype).mul(8).add(0.5)
    return dict(x=rnd(bsz, length, heads, headdim), a=a, b=rnd(bsz, length, groups, d_state),
                c=rnd(bsz, length, groups, d_state), dt=dt, d=rnd(heads),
                initial_state=rnd(bsz, heads, headdim, d_state))


CASES = [  # (length, chunk, heads, headdim, groups, d_state)
    (1, 4, 2, 3, 1, 4), (5, 4, 2, 3, 2, 4), (9, 4, 4, 2, 2, 3), (17, 5, 6, 4, 3, 5),
    (40, 8, 2, 8, 1, 6), (64, 16, 4, 4, 1, 8), (65, 22, 2, 16, 1, 8), (130, 32, 2, 8, 2, 4),
]


@pytest.mark.parametrize("inference", [False, True], ids=["autograd", "in_place"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("variant", ["full", "no_state", "no_dt_d"])
def test_fast_paths_equal_the_old_scan(case, dtype, variant, inference):
    """Both branches: autograd on (out of place) and inference mode (in place)."""
    with torch.inference_mode(inference):
        _check_fast_paths_equal_the_old_scan(case, dtype, variant)


def _check_fast_paths_equal_the_old_scan(case, dtype, variant):
    length, chunk, heads, headdim, groups, d_state = case
    kw = _inputs(2, length, heads, headdim, groups, d_state, dtype, seed=length + heads)
    if variant == "no_state":
        kw["initial_state"] = None
    if variant == "no_dt_d":
        kw["dt"] = kw["d"] = None
    x, a, b, c, s0 = kw["x"], kw["a"], kw["b"], kw["c"], kw["initial_state"]
    ref_y, ref_s = reference_ssd_chunked(x, a, b, c, chunk, s0, dt=kw["dt"], d=kw["d"])
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == torch.float64 else dict(rtol=2e-4, atol=2e-4)
    for name, (y, s) in {
        "chunked": ssd_chunked(x, a, b, c, chunk, s0, dt=kw["dt"], d=kw["d"]),
        "single": ssd_single_chunk(x, a, b, c, s0, dt=kw["dt"], d=kw["d"]),
        "multi": ssd_multi_chunk(x, a, b, c, chunk, s0, dt=kw["dt"], d=kw["d"]),
    }.items():
        torch.testing.assert_close(y, ref_y, **tol, msg=lambda m, n=name: f"{n} y: {m}")
        torch.testing.assert_close(s, ref_s, **tol, msg=lambda m, n=name: f"{n} state: {m}")


@pytest.mark.parametrize("length", [7, 65, 200])
def test_fast_paths_equal_the_sequential_recurrence_in_float64(length):
    kw = _inputs(3, length, 4, 8, 2, 6, torch.float64, seed=length)
    ref_y, ref_s = ssd_sequential(kw["x"], kw["a"], kw["b"], kw["c"], kw["initial_state"],
                                  dt=kw["dt"], d=kw["d"])
    for y, s in (ssd_single_chunk(**kw), ssd_multi_chunk(chunk_size=16, **kw)):
        assert (y - ref_y).abs().max() < 1e-6 and (s - ref_s).abs().max() < 1e-6


def test_single_chunk_cut_off_routes_short_sequences_only():
    cut = single_chunk_length(22, 128, 32)
    assert 22 < cut < 128  # between one chunk and the quadratic-cost regime
    kw = _inputs(1, cut + 1, 2, 64, 1, 32, torch.float64, seed=3)
    y, s = ssd_chunked(chunk_size=22, **kw)
    ref_y, ref_s = ssd_multi_chunk(chunk_size=22, **kw)
    torch.testing.assert_close(y, ref_y)
    torch.testing.assert_close(s, ref_s)


def test_final_state_false_skips_only_the_state():
    kw = _inputs(2, 30, 2, 4, 1, 3, torch.float64, seed=5)
    for length in (30, 12):  # multi-chunk, then single-chunk
        sub = {k: v[:, :length] if k in ("x", "a", "b", "c", "dt") else v for k, v in kw.items()}
        y, s = ssd_chunked(chunk_size=8, final_state=False, **sub)
        ref_y, _ = ssd_chunked(chunk_size=8, **sub)
        torch.testing.assert_close(y, ref_y)
        assert s is None or s.shape == kw["initial_state"].shape


def test_single_chunk_gradients_match_the_old_scan():
    kw = _inputs(2, 20, 2, 4, 1, 3, torch.float64, seed=9)
    grads = []
    for fn in (lambda **k: ssd_single_chunk(**k), lambda **k: reference_ssd_chunked(chunk_size=8, **k),
               lambda **k: ssd_multi_chunk(chunk_size=8, **k)):
        leaves = {k: v.clone().requires_grad_() for k, v in kw.items()}
        y, s = fn(**leaves)
        (y.square().sum() + s.sum()).backward()
        grads.append({k: v.grad for k, v in leaves.items()})
    for other in grads[1:]:
        for k in kw:
            torch.testing.assert_close(grads[0][k], other[k], msg=lambda m, k=k: f"grad {k}: {m}")


def reference_conv(mixer: Mamba2Mixer, xbc: torch.Tensor, conv_in: torch.Tensor | None):
    """The mixer's old conv: transposed, left-padded by the carried state, ``F.conv1d``."""
    xt = xbc.transpose(1, 2)
    width = mixer.d_conv - 1
    left = conv_in if conv_in is not None else xt.new_zeros(xt.shape[0], xt.shape[1], width)
    xt = torch.cat([left, xt], dim=-1)
    out = F.conv1d(xt, mixer.conv1d.weight, mixer.conv1d.bias, groups=mixer.conv_dim)
    return F.silu(out).transpose(1, 2), xt[..., xt.shape[-1] - width:]


@pytest.mark.parametrize("length", [1, 2, 3, 10])
@pytest.mark.parametrize("d_conv", [1, 2, 4])
@pytest.mark.parametrize("carried", [False, True])
def test_shifted_conv_equals_conv1d(length, d_conv, carried):
    torch.manual_seed(length * 10 + d_conv)
    mixer = Mamba2Mixer(8, d_state=4, d_conv=d_conv, headdim=4).double()
    xbc = torch.randn(3, length, mixer.conv_dim, dtype=torch.float64)
    conv_in = torch.randn(3, mixer.conv_dim, d_conv - 1, dtype=torch.float64) if carried else None
    out, state = mixer._conv_silu(xbc, conv_in)
    ref_out, ref_state = reference_conv(mixer, xbc, conv_in)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(state, ref_state)


@pytest.mark.parametrize("lookback", [20, 200])  # single chunk (23 steps), then several
def test_forecaster_matches_the_sequential_reference_model(lookback):
    """The whole forward (fast conv, single- or multi-chunk scan, in-place gating) against the
    step-by-step recurrent path, in inference mode where the in-place paths run."""
    cfg = Mamba2Config(n_static=2, n_observed=3, n_known=2, lookback=lookback, horizon=3,
                       hidden=16, n_layers=2, d_state=8, chunk_size=32, dropout=0.0)
    torch.manual_seed(0)
    model = Mamba2Forecaster(cfg).double().eval()
    g = torch.Generator().manual_seed(1)
    static = torch.randn(4, 2, generator=g, dtype=torch.float64)
    observed = torch.randn(4, lookback, 3, generator=g, dtype=torch.float64)
    known = torch.randn(4, lookback + 3, 2, generator=g, dtype=torch.float64)
    with torch.inference_mode():
        fast = model(static, observed, known)
    slow = model.forward_recurrent(static, observed, known)
    torch.testing.assert_close(fast, slow, rtol=1e-9, atol=1e-9)


def test_shifted_conv_gradients_equal_conv1d():
    torch.manual_seed(4)
    mixer = Mamba2Mixer(8, d_state=4, d_conv=4, headdim=4).double()
    xbc = torch.randn(2, 6, mixer.conv_dim, dtype=torch.float64, requires_grad=True)
    conv_in = torch.randn(2, mixer.conv_dim, 3, dtype=torch.float64, requires_grad=True)
    grads = []
    for fn in (mixer._conv_silu, lambda x, s: reference_conv(mixer, x, s)):
        mixer.zero_grad()
        out, state = fn(xbc, conv_in)
        gx, gs = torch.autograd.grad(out.square().sum() + state.sum(), (xbc, conv_in))
        gw, = torch.autograd.grad(fn(xbc, conv_in)[0].sum(), (mixer.conv1d.weight,))
        grads.append((gx, gs, gw))
    for mine, ref in zip(*grads, strict=True):
        torch.testing.assert_close(mine, ref)


@pytest.mark.parametrize("length,chunk", [(9, 4), (65, 22), (130, 32)])
@pytest.mark.parametrize("outputs", [0, 1, 6, 40])
def test_trailing_outputs_equal_the_full_scan(length, chunk, outputs):
    outputs = min(outputs, length)
    kw = _inputs(2, length, 4, 4, 2, 3, torch.float64, seed=length + outputs)
    y, s = ssd_chunked(chunk_size=chunk, outputs=outputs, **kw)
    ref_y, ref_s = reference_ssd_chunked(chunk_size=chunk, **kw)
    assert y.shape[1] == outputs
    torch.testing.assert_close(y, ref_y[:, length - outputs:])
    torch.testing.assert_close(s, ref_s)


@pytest.mark.parametrize("segment_tokens", [0, 40, 100])  # one block, time segments, row blocks
@pytest.mark.parametrize("outputs", [0, 1, 6, 30])
def test_backbone_forward_last_equals_the_tail_of_forward(segment_tokens, outputs):
    cfg = Mamba2Config(n_static=1, n_observed=2, n_known=1, hidden=16, n_layers=2, d_state=8,
                       chunk_size=8, segment_tokens=segment_tokens, dropout=0.0)
    torch.manual_seed(2)
    backbone = Mamba2Forecaster(cfg).double().eval().backbone
    x = torch.randn(5, 70, 16, dtype=torch.float64)
    with torch.inference_mode():
        full = backbone(x)
        tail = backbone.forward_last(x, outputs)
    torch.testing.assert_close(tail, full[:, full.shape[1] - outputs:])
    with pytest.raises(ValueError, match="outputs"):
        backbone.forward_last(x, 71)


@pytest.mark.parametrize("length,chunk", [(65, 22), (200, 32)])
def test_exp_floor_leaves_strongly_decaying_scans_unchanged(length, chunk):
    """Decays strong enough that most of each chunk's matrix would be denormal in float32:
    the floored float32 scan still equals the float64 recurrence to float32 accuracy."""
    kw = _inputs(2, length, 2, 8, 1, 4, torch.float64, seed=11)
    kw["a"] = kw["a"] * 40  # exp(cumsum differences) reaches e^-1000 within a chunk
    assert kw["a"].sum(1).min() < -1000
    ref_y, ref_s = ssd_sequential(**kw)
    with torch.inference_mode():
        y, s = ssd_chunked(chunk_size=chunk, **{k: v.float() for k, v in kw.items()})
    torch.testing.assert_close(y.double(), ref_y, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(s.double(), ref_s, rtol=1e-4, atol=1e-4)
