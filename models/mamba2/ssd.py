"""The state-space-duality (SSD) scan of Mamba-2, in plain PyTorch.

Follows ``ssd_minimal_discrete`` from Dao & Gu (2024), "Transformers are SSMs",
listing 1: the sequence is cut into chunks; within a chunk the output is a
masked (1-semiseparable) matrix product, like causal linear attention; across
chunks only the ``[heads, headdim, d_state]`` states are passed on. Departures
from the listing, all exact:

* lengths that are not a multiple of the chunk are right-padded with ``A = 0``
  (no decay) and ``X = B = C = dt = 0``, so padded steps neither write to nor
  decay the state, and the final state is the state after the last real step;
* the inter-chunk recurrence is a sequential pass over chunks (as the fused
  CUDA kernels do, ``_state_passing_fwd``) rather than the listing's
  ``[chunks, chunks]`` matrix, so the cost stays linear in the sequence length;
* the intra-chunk decay ``exp(sum a[s+1..l])`` is a difference of the chunk's
  cumulative sums (as the fused kernels compute it) instead of ``segsum``:
  the sums span one chunk only, and it saves a cumsum over a
  ``[chunk, chunk]`` tensor per head;
* ``dt`` and the skip ``D`` are folded into that small ``[chunk, chunk]`` decay
  matrix (``D`` on its diagonal) instead of passes over ``x`` and ``y``;
* sequences up to ``single_chunk_length`` are one chunk (``ssd_single_chunk``):
  no state is passed at all, and none is computed when the caller drops it.

Tensors are worked on head-major (``[batch, heads, chunk, step, ...]``), the
layout the batched products want. ``B`` and ``C`` carry a group axis ``g``
(``heads % g == 0``); Mamba-2 shares them across the heads of a group.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def ssd_chunked(
    x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, chunk_size: int,
    initial_state: torch.Tensor | None = None, *, dt: torch.Tensor | None = None,
    d: torch.Tensor | None = None, final_state: bool = True, outputs: int | None = None,
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
        outputs: return ``y`` for only the last ``outputs`` steps (``None``: all). The
            steps before them are reduced to the state they leave (``ssd_state``), and the
            last ones scanned from it, so their ``y`` is computed and nothing else.

    Returns:
        ``y`` ``[batch, length, heads, headdim]`` and the final state.

    Sequences up to ``single_chunk_length`` are scanned as one chunk
    (``ssd_single_chunk``), where that is cheaper; the result is the same.
    """
    _check_scan_args(x, a, b, c, chunk_size, dt, outputs)
    bsz, length, heads, headdim = x.shape
    d_state = b.shape[3]
    if outputs is not None and outputs < length:
        cut = length - outputs
        state = ssd_state(x[:, :cut], a[:, :cut], b[:, :cut], chunk_size, initial_state,
                          dt=None if dt is None else dt[:, :cut])
        if outputs == 0:
            return x.new_zeros(bsz, 0, heads, headdim), state
        return ssd_chunked(x[:, cut:], a[:, cut:], b[:, cut:], c[:, cut:], chunk_size, state,
                           dt=None if dt is None else dt[:, cut:], d=d, final_state=final_state)
    if length <= single_chunk_length(chunk_size, heads * headdim, d_state):
        return ssd_single_chunk(x, a, b, c, initial_state, dt=dt, d=d,
                                final_state=final_state)
    y, state = ssd_multi_chunk(x, a, b, c, chunk_size, initial_state, dt=dt, d=d)
    return y, state if final_state else None


def _check_scan_args(
    x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, chunk_size: int,
    dt: torch.Tensor | None, outputs: int | None,
) -> None:
    """Shapes ``ssd_chunked`` documents; a mismatch raises here rather than deep in a product."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    bsz, length, heads, _ = x.shape
    groups = b.shape[2]
    if a.shape != (bsz, length, heads) or (dt is not None and dt.shape != a.shape):
        raise ValueError(f"a and dt must be {(bsz, length, heads)}, got a {tuple(a.shape)}"
                         + ("" if dt is None else f", dt {tuple(dt.shape)}"))
    if b.shape != c.shape or b.shape[:2] != (bsz, length) or heads % groups:
        raise ValueError(
            f"b and c must be [batch, length, groups, d_state] with heads % groups == 0; "
            f"got b {tuple(b.shape)}, c {tuple(c.shape)}, heads {heads}"
        )
    if outputs is not None and not 0 <= outputs <= length:
        raise ValueError(f"outputs must be in [0, {length}], got {outputs}")


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
    heads, groups = x.shape[2], b.shape[2]
    r = heads // groups
    # contiguous: a strided [b, h, l] makes M below come out strided, ~10x slower to build
    a_cumsum = torch.cumsum(a.transpose(1, 2), dim=-1).contiguous()  # b h l
    # causal C_l . B_s per group: the zeros above the diagonal mask M below
    scores = torch.tril(c.transpose(1, 2) @ b.permute(0, 2, 3, 1))  # b g l s
    dt_hm = None if dt is None else dt.transpose(1, 2)  # b h l
    m = _masked_decay_matrix(a_cumsum, scores, dt_hm, d)  # b h l s
    x_hm = x.transpose(1, 2)  # b h l p
    y = m @ x_hm
    if initial_state is not None:
        c_hm = c.transpose(1, 2).repeat_interleave(r, 1) if r > 1 else c.transpose(1, 2)
        state_in = initial_state.to(x.dtype)  # b h p n
        y = torch.addcmul(y, c_hm @ state_in.transpose(-1, -2), _decay(a_cumsum).unsqueeze(-1))
    state = None
    if final_state:
        # state = sum_s exp(sum a[s+1..L]) dt_s x_s outer B_s, as [p, l] @ [l, n] per head
        w = _decay(a_cumsum[..., -1:] - a_cumsum)  # b h l
        if dt_hm is not None:
            w = w * dt_hm
        b_hm = b.transpose(1, 2).repeat_interleave(r, 1) if r > 1 else b.transpose(1, 2)
        state = x_hm.transpose(-1, -2) @ (b_hm * w.unsqueeze(-1))  # b h p n
        if initial_state is not None:
            state = torch.addcmul(state, state_in, _decay(a_cumsum[..., -1])[..., None, None])
    return y.transpose(1, 2), state


def ssd_state(
    x: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    chunk_size: int,
    initial_state: torch.Tensor | None = None,
    *,
    dt: torch.Tensor | None = None,
) -> torch.Tensor:
    """The state ``ssd_chunked`` ends in, without its outputs (no ``C``, no ``D``): what a
    caller that needs no ``y`` for these steps passes on. Same chunking, so the same sums."""
    bsz, length, heads, headdim = x.shape
    d_state = b.shape[3]
    if length <= single_chunk_length(chunk_size, heads * headdim, d_state):
        chunk_size = max(length, 1)
    pad = (-length) % chunk_size
    n_chunks = (length + pad) // chunk_size
    x_hm, b_g, a_cumsum, dt_hm = _head_major(x, a, b, dt, chunk_size)
    chunk_states = _chunk_states(x_hm, b_g, a_cumsum, dt_hm)  # b h k n p
    state = _state_in(x, initial_state, d_state)
    chunk_decay = _decay(a_cumsum[..., -1]).unsqueeze(-1).unsqueeze(-1)  # b h k 1 1
    for k in range(n_chunks):
        state = torch.addcmul(chunk_states[:, :, k], state, chunk_decay[:, :, k])
    return state.transpose(-1, -2)


def _head_major(
    x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, dt: torch.Tensor | None, chunk_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``x [b h k l p]`` (contiguous), ``b [b g k l n]``, cumulative ``a [b h k l]``
    (contiguous) and ``dt [b h k l]``: padded to whole chunks with a = x = B = dt = 0."""
    a_cumsum = torch.cumsum(_chunked(a, chunk_size), dim=-1).contiguous()
    dt_hm = None if dt is None else _chunked(dt, chunk_size)
    return _chunked(x, chunk_size).contiguous(), _chunked(b, chunk_size), a_cumsum, dt_hm


def _chunked(t: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """``[b, l, k, ...] -> [b, k, chunk, step, ...]``, right-padded with zeros to whole chunks."""
    pad = (-t.shape[1]) % chunk_size
    t = t.transpose(1, 2)
    if pad:
        t = F.pad(t, (0, 0) * (t.dim() - 3) + (0, pad))
    return t.reshape(t.shape[0], t.shape[1], -1, chunk_size, *t.shape[3:])


def _chunk_states(
    x_hm: torch.Tensor, b_g: torch.Tensor, a_cumsum: torch.Tensor, dt_hm: torch.Tensor | None
) -> torch.Tensor:
    """Each chunk's own contribution to the state at its end, ``[b h k n p]``:
    ``sum_s exp(cs_end - cs_s) dt_s B_s outer x_s``."""
    bsz, heads, n_chunks, chunk_size, _ = x_hm.shape
    groups, d_state = b_g.shape[1], b_g.shape[-1]
    w = _decay(a_cumsum[..., -1:] - a_cumsum)  # b h k l
    if dt_hm is not None:
        w = w * dt_hm
    r = heads // groups
    bw = b_g.unsqueeze(2) * w.view(bsz, groups, r, n_chunks, chunk_size, 1)  # b g r k l n
    return bw.view(bsz, heads, n_chunks, chunk_size, d_state).transpose(-1, -2) @ x_hm


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
    shortcut); arguments already checked.

    Head-major layout ``[b, h, chunk, step, ...]``: one copy of ``x`` (which the padding or
    the per-head products need anyway) serves the diagonal blocks and the chunk states;
    ``dt`` and ``D`` enter the small decay factors, never a pass over ``x`` or ``y``. States
    are kept as ``[d_state, headdim]`` so both state products are plain (a transposed
    operand makes the batched GEMM ~3x slower)."""
    bsz, length, heads, headdim = x.shape
    groups, d_state = b.shape[2], b.shape[3]
    r = heads // groups
    n_chunks = -(-length // chunk_size)
    inplace = not torch.is_grad_enabled()

    # padded steps: a = 0 (no decay), x = B = C = dt = 0 (no input)
    x_hm, b_g, a_cumsum, dt_hm = _head_major(x, a, b, dt, chunk_size)
    c_g = _chunked(c, chunk_size)  # b g k l n

    # 1. diagonal blocks: y = M @ x with M[l, s] = C_l . B_s exp(cs_l - cs_s) dt_s (s <= l)
    #    plus D on the diagonal
    scores = torch.tril(c_g @ b_g.transpose(-1, -2))  # b g k l s
    y = _masked_decay_matrix(a_cumsum, scores, dt_hm, d) @ x_hm  # b h k l p

    # 2. each chunk's own contribution to the state at its end, [n, p] per head
    chunk_states = _chunk_states(x_hm, b_g, a_cumsum, dt_hm)

    # 3. inter-chunk recurrence: the state entering each chunk, b h n p
    state = _state_in(x, initial_state, d_state)
    states_in, state = _states_entering(state, chunk_states, a_cumsum)

    # 4. state -> output within each chunk, C_l . state * exp(cs_l), C shared by a group
    c_h = c_g.unsqueeze(2).expand(bsz, groups, r, n_chunks, chunk_size, d_state)
    y_off = c_h.reshape(bsz, heads, n_chunks, chunk_size, d_state) @ states_in
    if inplace:
        y.addcmul_(y_off, _decay(a_cumsum).unsqueeze(-1))
    else:
        y = torch.addcmul(y, y_off, _decay(a_cumsum).unsqueeze(-1))
    y = y.view(bsz, heads, n_chunks * chunk_size, headdim)[:, :, :length]
    return y.transpose(1, 2), state.transpose(-1, -2)


def _masked_decay_matrix(
    a_cumsum: torch.Tensor, scores: torch.Tensor, dt_hm: torch.Tensor | None,
    d: torch.Tensor | None,
) -> torch.Tensor:
    """The diagonal block of every chunk, ``[b, h, *chunks, l, s]``:
    ``M[l, s] = scores[l, s] * exp(cs_l - cs_s) * dt_s`` (``scores`` the causal ``C_l . B_s``
    per group, zero above the diagonal) with the skip ``D`` on the diagonal.

    ``a_cumsum`` is ``[b, h, *chunks, l]`` (contiguous) and ``dt_hm`` the same shape; the
    chunk axes are whatever the caller has (none for a single chunk). Every elementwise
    factor is applied in place where autograd keeps no operand of these products."""
    bsz, heads, *inner = a_cumsum.shape
    groups, length = scores.shape[1], inner[-1]
    r = heads // groups
    inplace = not torch.is_grad_enabled()
    # exp(cumsum_l - cumsum_s); the clamp at 0 only tames the upper triangle the scores zero
    # (exp of large or -inf values takes a slow path, as does a masked_fill: both measured
    # slower), the floor keeps exp out of the denormal range (see ``exp_floor``)
    m = a_cumsum.unsqueeze(-1) - a_cumsum.unsqueeze(-2)
    floor = exp_floor(m.dtype)
    m = m.clamp_(floor, 0).exp_() if inplace else m.clamp(floor, 0).exp()
    m = m.view(bsz, groups, r, *inner, length)
    m = m.mul_(scores.unsqueeze(2)) if inplace else m * scores.unsqueeze(2)
    if dt_hm is not None:
        dt_s = dt_hm.reshape(bsz, groups, r, *inner[:-1], 1, length)
        m = m.mul_(dt_s) if inplace else m * dt_s
    m = m.view(bsz, heads, *inner, length)
    if d is not None:
        skip = d.to(m.dtype).view(heads, *([1] * len(inner))).expand(heads, *inner)
        if inplace:
            m.diagonal(dim1=-2, dim2=-1).add_(skip)
        else:
            m = m + torch.diag_embed(skip)
    return m


def _state_in(x: torch.Tensor, initial_state: torch.Tensor | None, d_state: int) -> torch.Tensor:
    """The state entering the first chunk as ``[b, h, d_state, headdim]`` (zeros if none)."""
    bsz, _, heads, headdim = x.shape
    if initial_state is None:
        return x.new_zeros(bsz, heads, d_state, headdim)
    return initial_state.to(x.dtype).transpose(-1, -2)


def _states_entering(
    state: torch.Tensor, chunk_states: torch.Tensor, a_cumsum: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inter-chunk recurrence: the state entering each chunk ``[b h k n p]`` and the final one."""
    bsz, heads, n_chunks, d_state, headdim = chunk_states.shape
    chunk_decay = _decay(a_cumsum[..., -1]).unsqueeze(-1).unsqueeze(-1)  # b h k 1 1
    own, decay = chunk_states.unbind(2), chunk_decay.unbind(2)
    if not torch.is_grad_enabled():  # one op per chunk, in place: per-chunk dispatch dominates
        states = state.new_empty(bsz, heads, n_chunks + 1, d_state, headdim)
        views = states.unbind(2)
        views[0].copy_(state)
        for k in range(n_chunks):
            torch.addcmul(own[k], views[k], decay[k], out=views[k + 1])
        return states[:, :, :-1], views[-1]
    entering = []
    for k in range(n_chunks):
        entering.append(state)
        state = torch.addcmul(own[k], state, decay[k])
    return torch.stack(entering, dim=2), state


def exp_floor(dtype: torch.dtype) -> float:
    """Lower bound put on the log-decays before ``exp``: results that would be denormal
    (below ~1e-38 in float32) make ``exp`` ~14x slower and every product they enter slow
    too, and with strong decays most of a chunk's matrix is there. ``exp(-60)`` ~ 1e-26 is
    far below float32 resolution of anything it is added to; float64 keeps its full range."""
    return -700.0 if dtype == torch.float64 else -60.0


def _decay(log_decay: torch.Tensor) -> torch.Tensor:
    return torch.exp(log_decay.clamp(min=exp_floor(log_decay.dtype)))


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
