"""The state-space-duality (SSD) scan of Mamba-2, in plain PyTorch.

Follows ``ssd_minimal_discrete`` from Dao & Gu (2024), "Transformers are SSMs",
listing 1: the sequence is cut into chunks; within a chunk the output is a
masked (1-semiseparable) matrix product, like causal linear attention; across
chunks only the ``[heads, headdim, d_state]`` states are passed on. Three
departures from the listing, all exact:

* lengths that are not a multiple of the chunk are right-padded with ``A = 0``
  (no decay) and ``X = B = C = 0``, so padded steps neither write to nor decay
  the state, and the final state is the state after the last real step;
* the inter-chunk recurrence is a sequential pass over chunks (as the fused
  CUDA kernels do, ``_state_passing_fwd``) rather than the listing's
  ``[chunks, chunks]`` matrix, so the cost stays linear in the sequence length;
* the intra-chunk decay ``exp(sum a[s+1..l])`` is a difference of the chunk's
  cumulative sums (as the fused kernels compute it) instead of ``segsum``:
  the sums span one chunk only, and it saves a cumsum over a
  ``[chunk, chunk]`` tensor per head.

``B`` and ``C`` carry a group axis ``g`` (``heads % g == 0``); Mamba-2 shares
them across the heads of a group, and keeping the axis avoids ``heads``-fold
copies of them in the products.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def ssd_chunked(
    x: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    chunk_size: int,
    initial_state: torch.Tensor | None = None,
    *,
    dt: torch.Tensor | None = None,
    d: torch.Tensor | None = None,
    final_state: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Chunked SSD scan.

    Recurrence it computes, per head ``h`` (group ``g = h // (heads / groups)``)::

        state_t = exp(a_t) * state_{t-1} + (dt_t * x_t) outer b_t     # [headdim, d_state]
        y_t     = state_t @ c_t + d_h * x_t

    Args:
        x: ``[batch, length, heads, headdim]``.
        a: ``[batch, length, heads]`` log decay per step (``dt * A``, <= 0).
        b, c: ``[batch, length, groups, d_state]``.
        chunk_size: steps per chunk.
        initial_state: ``[batch, heads, headdim, d_state]`` or ``None`` (zeros).
        dt: ``[batch, length, heads]`` input scale, or ``None`` (ones), as the fused
            kernels take it.
        d: ``[heads]`` skip weight, or ``None`` (no skip).
        final_state: ``False`` when the caller drops the state (``None`` is returned);
            short sequences then skip computing it.

    Returns:
        ``y`` ``[batch, length, heads, headdim]`` and the final state.

    Sequences up to ``single_chunk_length`` are scanned as one chunk
    (``ssd_single_chunk``), where that is cheaper; the result is the same.
    """
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
    if length <= single_chunk_length(chunk_size, heads * headdim, d_state):
        return ssd_single_chunk(x, a, b, c, initial_state, dt=dt, d=d,
                                final_state=final_state)
    y, state = ssd_multi_chunk(x, a, b, c, chunk_size, initial_state, dt=dt, d=d)
    return y, state if final_state else None


def single_chunk_length(chunk_size: int, width: int, d_state: int) -> int:
    """Longest sequence scanned as one chunk.

    Per token, chunking costs ``2 * d_state * width`` multiply-adds to write and read the
    passed state plus ``chunk * (d_state + width)`` for its diagonal block; one chunk of
    ``L`` costs ``L * (d_state + width)`` and passes no state (and its fewer, larger
    products run faster than the model count says). Break-even is this length."""
    return chunk_size + (2 * d_state * width) // (d_state + width)


def ssd_single_chunk(
    x: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    *,
    dt: torch.Tensor | None = None,
    d: torch.Tensor | None = None,
    final_state: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The whole sequence as one chunk: ``y = M @ x`` per head with the masked decay matrix
    ``M[l, s] = C_l . B_s * exp(sum a[s+1..l]) * dt_s`` (``s <= l``), the skip ``D`` on its
    diagonal, plus the decayed initial state read by ``C``. Same arguments as
    ``ssd_chunked``; for short sequences it skips the inter-chunk state passing, and
    ``final_state=False`` skips the state too (returned as ``None``).

    Head-major ``[B, H, L, ...]`` views of the ``[B, L, H, ...]`` inputs are fed to the
    products directly, and every elementwise factor is applied in place on ``M``, so the
    only full-size passes are the products themselves."""
    bsz, length, heads = x.shape[:3]
    groups = b.shape[2]
    r = heads // groups
    # contiguous: a strided [b, h, l] makes M below come out strided, ~10x slower to build
    a_cumsum = torch.cumsum(a.transpose(1, 2), dim=-1).contiguous()  # b h l
    # causal C_l . B_s per group: the zeros above the diagonal mask M below
    scores = torch.tril(c.transpose(1, 2) @ b.permute(0, 2, 3, 1))  # b g l s
    # in place only where autograd keeps no operand of these products
    inplace = not torch.is_grad_enabled()
    # exp(cumsum_l - cumsum_s); the clamp only tames the upper triangle (exp of large or
    # -inf values takes a slow path, as does a masked_fill: both measured slower)
    m = a_cumsum.unsqueeze(-1) - a_cumsum.unsqueeze(-2)  # b h l s
    m = m.clamp_(max=0).exp_() if inplace else m.clamp(max=0).exp()
    m = m.view(bsz, groups, r, length, length)
    m = m.mul_(scores.unsqueeze(2)) if inplace else m * scores.unsqueeze(2)
    dt_hm = None if dt is None else dt.transpose(1, 2)  # b h l
    if dt_hm is not None:
        dt_s = dt_hm.reshape(bsz, groups, r, 1, length)
        m = m.mul_(dt_s) if inplace else m * dt_s
    m = m.view(bsz, heads, length, length)
    if d is not None:
        skip = d.to(m.dtype)[:, None].expand(heads, length)
        if inplace:
            m.diagonal(dim1=-2, dim2=-1).add_(skip)
        else:
            m = m + torch.diag_embed(skip)
    x_hm = x.transpose(1, 2)  # b h l p
    y = m @ x_hm
    if initial_state is not None:
        c_hm = c.transpose(1, 2).repeat_interleave(r, 1) if r > 1 else c.transpose(1, 2)
        state_in = initial_state.to(x.dtype)  # b h p n
        y = torch.addcmul(y, c_hm @ state_in.transpose(-1, -2), torch.exp(a_cumsum).unsqueeze(-1))
    state = None
    if final_state:
        # state = sum_s exp(sum a[s+1..L]) dt_s x_s outer B_s, as [p, l] @ [l, n] per head
        w = torch.exp(a_cumsum[..., -1:] - a_cumsum)  # b h l
        if dt_hm is not None:
            w = w * dt_hm
        b_hm = b.transpose(1, 2).repeat_interleave(r, 1) if r > 1 else b.transpose(1, 2)
        state = x_hm.transpose(-1, -2) @ (b_hm * w.unsqueeze(-1))  # b h p n
        if initial_state is not None:
            state = torch.addcmul(state, state_in, torch.exp(a_cumsum[..., -1])[..., None, None])
    return y.transpose(1, 2), state


def ssd_multi_chunk(
    x: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    chunk_size: int,
    initial_state: torch.Tensor | None,
    *,
    dt: torch.Tensor | None,
    d: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``ssd_chunked`` with chunks of exactly ``chunk_size`` steps (no single-chunk
    shortcut); arguments already checked."""
    bsz, length, heads, headdim = x.shape
    groups, d_state = b.shape[2], b.shape[3]
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


def ssd_sequential(
    x: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    *,
    dt: torch.Tensor | None = None,
    d: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same recurrence one step at a time: the reference for tests and the recurrent path."""
    bsz, length, heads, headdim = x.shape
    groups, d_state = b.shape[2], b.shape[3]
    r = heads // groups
    state = (
        x.new_zeros(bsz, heads, headdim, d_state)
        if initial_state is None
        else initial_state.to(x.dtype)
    )
    ys = []
    for t in range(length):
        y, state = ssd_step(x[:, t], a[:, t], b[:, t].repeat_interleave(r, 1),
                            c[:, t].repeat_interleave(r, 1), state,
                            dt=None if dt is None else dt[:, t], d=d)
        ys.append(y)
    return torch.stack(ys, dim=1), state


def ssd_step(
    x: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    state: torch.Tensor,
    *,
    dt: torch.Tensor | None = None,
    d: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step: ``x [B, H, P]``, ``a``/``dt`` ``[B, H]``, ``b``/``c`` ``[B, H, N]``,
    ``d [H]``, state ``[B, H, P, N]``."""
    x_in = x if dt is None else x * dt.unsqueeze(-1)
    state = state * torch.exp(a)[..., None, None] + x_in.unsqueeze(-1) * b.unsqueeze(-2)
    y = torch.einsum("bhpn,bhn->bhp", state, c)
    if d is not None:
        y = y + x * d[:, None]
    return y, state
