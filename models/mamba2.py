"""Mamba-2 quantile forecaster in pure PyTorch (the ``mamba-ssm`` package has no CPU path).

Design. A window is read as one causal sequence of ``T + H`` tokens:

* history token ``t < T``: ``Linear([observed_t, known_t])``;
* future token ``T + h``: ``Linear(known_{T+h}) + horizon_embedding[h]`` (no
  observed values exist there, so a separate projection says so);
* every token also gets ``Linear(static)``, so the per-root constants
  condition the whole scan.

The stacked Mamba-2 blocks run over all ``T + H`` tokens. Because every block
is causal, the history part is exactly "scan the history", and the future part
continues the same recurrence from the state the history left, fed only with
inputs known in advance. The quantiles of the ``h``-step return are read by a
non-crossing head (``models.quantile.MonotoneQuantileHead``) from the hidden
state at future token ``T + h - 1`` plus the one at the last history token:
that skip hands the head the freshest observation directly instead of making
it cross one more step of the recurrence (on the synthetic data it is what
lets a small model beat climatology within a few epochs). The horizon-``h``
forecast never sees known inputs beyond its own step, and the model accepts
any history length ``T`` (cost linear in ``T``).

Block (Dao & Gu 2024, "Transformers are SSMs", the Mamba-2 block): one input
projection to ``z, x, B, C, dt``; a short causal depthwise convolution and
SiLU on ``(x, B, C)``; the SSD scan with per-head scalar decay
``A = -exp(A_log)`` and step ``dt = softplus(dt + dt_bias)``; skip ``D * x``;
gated RMSNorm ``norm(y * silu(z))``; output projection. Blocks are pre-norm
residual. ``step`` runs the same network one token at a time with an explicit
(conv, SSM) state and matches the parallel path.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from models.quantile import MonotoneQuantileHead
from models.ssd import ssd_chunked, ssd_step
from models.windows import DEFAULT_QUANTILES

KERNELS = ("torch", "auto")

# (conv_state [B, conv_dim, d_conv - 1], ssm_state [B, heads, headdim, d_state]) per layer
LayerState = tuple[torch.Tensor, torch.Tensor]


@dataclass
class Mamba2Config:
    n_static: int
    n_observed: int
    n_known: int
    lookback: int = 60
    horizon: int = 5
    quantiles: tuple[float, ...] = DEFAULT_QUANTILES
    hidden: int = 64  # d_model
    n_layers: int = 2
    d_state: int = 32
    d_conv: int = 4
    expand: int = 2
    # None: gcd(hidden * expand, 64), i.e. Mamba-2's 64 where it divides the inner width
    headdim: int | None = None
    ngroups: int = 1
    chunk_size: int = 32
    # On CPU, large inputs are scanned in blocks of about this many tokens (batch x
    # steps): rows apart first, then, for rows longer than that, time segments that
    # carry the (conv, SSM) state. Exact either way; it keeps the working set in
    # cache, so the cost stays linear in the length. 0 = one block. 2048 measured best
    # (vs 1024 and 3072) at batch 32 x T = 60 and 240, batch 64 x 60 and batch 1 x 3840.
    segment_tokens: int = 2048
    dropout: float = 0.1
    # "torch": the pure SSD scan (default, tested); "auto": mamba_ssm's fused
    # kernel when it is importable and the tensors are on CUDA, else "torch".
    kernel: str = "torch"

    def __post_init__(self) -> None:
        self.quantiles = tuple(float(q) for q in self.quantiles)
        if self.headdim is not None and int(self.headdim) < 1:
            raise ValueError(f"Mamba2Config.headdim must be >= 1 or None, got {self.headdim}")
        for name in ("n_static", "n_known"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"Mamba2Config.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("n_observed", "lookback", "horizon", "hidden", "n_layers", "d_state",
                     "d_conv", "expand", "ngroups", "chunk_size"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"Mamba2Config.{name} must be >= 1, got {getattr(self, name)}")
        if not self.quantiles or any(not 0.0 < q < 1.0 for q in self.quantiles) or any(
            b <= a for a, b in zip(self.quantiles, self.quantiles[1:], strict=False)
        ):
            raise ValueError(
                f"Mamba2Config.quantiles must be strictly increasing in (0, 1), got {self.quantiles}"
            )
        if self.d_inner % self.head_dim:
            raise ValueError(
                f"Mamba2Config: hidden * expand ({self.d_inner}) must be a multiple of "
                f"headdim ({self.headdim})"
            )
        if self.n_heads % self.ngroups:
            raise ValueError(
                f"Mamba2Config: heads ({self.n_heads}) must be a multiple of ngroups ({self.ngroups})"
            )
        if self.segment_tokens < 0:
            raise ValueError(f"Mamba2Config.segment_tokens must be >= 0, got {self.segment_tokens}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"Mamba2Config.dropout must be in [0, 1), got {self.dropout}")
        if self.kernel not in KERNELS:
            raise ValueError(f"Mamba2Config.kernel must be one of {KERNELS}, got {self.kernel!r}")

    @property
    def d_inner(self) -> int:
        return self.hidden * self.expand

    @property
    def n_heads(self) -> int:
        return self.d_inner // self.head_dim

    @property
    def head_dim(self) -> int:
        """``headdim`` resolved (``None`` -> ``gcd(d_inner, 64)``)."""
        return int(self.headdim) if self.headdim is not None else math.gcd(self.d_inner, 64)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["quantiles"] = list(self.quantiles)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Mamba2Config:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"Mamba2Config.from_dict: unknown field(s) {unknown}")
        return cls(**dict(d))


class RMSNormGated(nn.Module):
    """``rmsnorm(x * silu(z)) * weight``: Mamba-2's gate-then-normalise output norm."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x * F.silu(z), (x.shape[-1],), self.weight, self.eps)

    def project(self, x: torch.Tensor, z: torch.Tensor, linear: nn.Module) -> torch.Tensor:
        """``linear(forward(x, z))`` for a bias-free ``linear``: the per-token 1/rms is
        applied after the projection, where the tensor is narrower, saving two passes
        over the wide one."""
        return self.project_gated(x * F.silu(z), linear)

    def project_gated(self, g: torch.Tensor, linear: nn.Module) -> torch.Tensor:
        """``project`` from the gated ``g = x * silu(z)``, for callers that gate in place."""
        sq = torch.linalg.vector_norm(g, dim=-1, keepdim=True).square()
        inv = torch.rsqrt(sq / g.shape[-1] + self.eps)
        return linear(g * self.weight) * inv


@functools.cache
def _fused_scan() -> Callable[..., Any] | None:
    try:
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    except Exception:  # not installed, or no triton / CUDA build
        return None
    return mamba_chunk_scan_combined


def balanced_chunk(length: int, chunk_size: int) -> int:
    """The chunk that keeps the number of chunks of ``chunk_size`` but pads least
    (65 steps at chunk 64: two chunks of 33, not 64 + 1 padded to 128)."""
    return math.ceil(length / math.ceil(length / chunk_size))


class Mamba2Mixer(nn.Module):
    """The Mamba-2 token mixer (no residual, no pre-norm)."""

    def __init__(
        self,
        d_model: int,
        d_state: int = 32,
        d_conv: int = 4,
        expand: int = 2,
        headdim: int = 64,
        ngroups: int = 1,
        chunk_size: int = 32,
        kernel: str = "torch",
        dt_min: float = 1e-3,
        dt_max: float = 1e-1,
    ):
        super().__init__()
        self.d_inner = d_model * expand
        if self.d_inner % headdim:
            raise ValueError(f"d_model * expand ({self.d_inner}) must be a multiple of headdim")
        self.d_state, self.d_conv, self.headdim, self.ngroups = d_state, d_conv, headdim, ngroups
        self.n_heads = self.d_inner // headdim
        self.chunk_size, self.kernel = chunk_size, kernel
        self.conv_dim = self.d_inner + 2 * ngroups * d_state
        self.in_proj = nn.Linear(d_model, self.d_inner + self.conv_dim + self.n_heads, bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, d_conv, groups=self.conv_dim)
        # dt init log-uniform in [dt_min, dt_max]; the bias is its inverse softplus
        dt = torch.exp(
            torch.rand(self.n_heads) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)
        ).clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.A_log = nn.Parameter(torch.log(torch.empty(self.n_heads).uniform_(1, 16)))
        self.D = nn.Parameter(torch.ones(self.n_heads))
        self.norm = RMSNormGated(self.d_inner)
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)

    def initial_state(self, batch: int, device: torch.device, dtype: torch.dtype) -> LayerState:
        return (
            torch.zeros(batch, self.conv_dim, self.d_conv - 1, device=device, dtype=dtype),
            torch.zeros(batch, self.n_heads, self.headdim, self.d_state, device=device, dtype=dtype),
        )

    def _split(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        z, xbc, dt = torch.split(u, [self.d_inner, self.conv_dim, self.n_heads], dim=-1)
        return z, xbc, dt

    def _conv_silu(
        self, xbc: torch.Tensor, conv_in: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``silu(causal depthwise conv(xbc))`` for ``xbc [B, L, C]``, left context ``conv_in
        [B, C, d_conv - 1]`` (zeros if ``None``); returns it and the new conv state.

        Computed as ``d_conv`` shifted multiply-adds in the ``[B, L, C]`` layout the
        projection writes: the same sum as ``conv1d`` (cross-correlation, taps
        oldest-first), without the two transposes, the padded copy and the depthwise
        oneDNN kernel, which together cost ~7x more at these widths."""
        width = self.d_conv - 1
        bsz, length, channels = xbc.shape
        taps = self.conv1d.weight[:, 0].t().contiguous()  # [d_conv, C]: strided taps cost 3x
        # tap k reads x[t - (width - k)]: the newest tap sets out, the older ones add shifted
        # slices, and only the first steps of a carried scan read the carried context
        out = torch.addcmul(self.conv1d.bias, xbc, taps[width])
        context = None if conv_in is None else conv_in.transpose(1, 2)  # [B, width, C]
        for k in range(width):
            shift = width - k
            if shift < length:
                out[:, shift:].addcmul_(xbc[:, : length - shift], taps[k])
            if context is not None:
                n = min(shift, length)
                out[:, :n].addcmul_(context[:, k : k + n], taps[k])
        if length >= width:
            conv_state = xbc[:, length - width :].transpose(1, 2)
        else:
            if context is None:
                context = xbc.new_zeros(bsz, width, channels)
            conv_state = torch.cat([context[:, length:], xbc], dim=1).transpose(1, 2)
        return F.silu(out, inplace=True), conv_state

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return self.forward_with_state(u)[0]

    def forward_with_state(
        self, u: torch.Tensor, state: LayerState | None = None, *, final_state: bool = True,
        outputs: int | None = None,
    ) -> tuple[torch.Tensor, LayerState]:
        """``u [B, L, d_model]`` -> output and the state after the last step (to continue
        with ``step``). ``final_state=False``: the caller drops the state, so a short scan may
        skip computing its SSM part (then ``None``). ``outputs``: only the last ``outputs``
        steps' output is wanted (``[B, outputs, d_model]``); the others are only scanned."""
        bsz, length, _ = u.shape
        kept = length if outputs is None else outputs
        if kept < length and type(self.in_proj) is nn.Linear:
            # the gate z is read at the kept steps only: project just those rows for it
            w, bias = self.in_proj.weight, self.in_proj.bias
            cut = self.d_inner
            z = F.linear(u[:, length - kept :], w[:cut], None if bias is None else bias[:cut])
            rest = F.linear(u, w[cut:], None if bias is None else bias[cut:])
            xbc, dt = torch.split(rest, [self.conv_dim, self.n_heads], dim=-1)
        else:
            z, xbc, dt = self._split(self.in_proj(u))
            z = z[:, length - kept :]
        xbc, conv_state = self._conv_silu(xbc, None if state is None else state[0])
        x, b, c = torch.split(
            xbc, [self.d_inner, self.ngroups * self.d_state, self.ngroups * self.d_state], dim=-1
        )
        x = x.reshape(bsz, length, self.n_heads, self.headdim)
        b = b.reshape(bsz, length, self.ngroups, self.d_state)
        c = c.reshape(bsz, length, self.ngroups, self.d_state)
        dt = F.softplus(dt + self.dt_bias)  # B L H
        a = -torch.exp(self.A_log.float()).to(dt.dtype)  # H
        ssm_in = state[1] if state is not None else None
        fused = _fused_scan() if self.kernel == "auto" and u.is_cuda else None
        if fused is not None:
            y, ssm_state = fused(
                x.contiguous(), dt.contiguous(), a, b.contiguous(), c.contiguous(),
                self.chunk_size, D=self.D, initial_states=ssm_in, return_final_states=True,
            )
            y = y[:, length - kept :]
        else:
            y, ssm_state = ssd_chunked(
                x, dt * a, b, c, balanced_chunk(length, self.chunk_size), ssm_in, dt=dt, d=self.D,
                final_state=final_state, outputs=outputs,
            )
        # gate y [B, L, H, P] (head-major strides from a short scan) into silu(z)'s fresh
        # buffer: one pass, where reshaping y first would copy it
        gate = F.silu(z).reshape(y.shape)
        g = gate.mul_(y) if not torch.is_grad_enabled() else gate * y
        out = self.norm.project_gated(g.reshape(bsz, kept, self.d_inner), self.out_proj)
        return out, (conv_state, ssm_state)

    def step(self, u: torch.Tensor, state: LayerState) -> tuple[torch.Tensor, LayerState]:
        """One token ``u [B, d_model]``; O(1) in the sequence length."""
        conv_state, ssm_state = state
        z, xbc, dt = self._split(self.in_proj(u))
        window = torch.cat([conv_state, xbc.unsqueeze(-1)], dim=-1)  # B C d_conv
        xbc = F.silu((window * self.conv1d.weight[:, 0]).sum(-1) + self.conv1d.bias)
        x, b, c = torch.split(
            xbc, [self.d_inner, self.ngroups * self.d_state, self.ngroups * self.d_state], dim=-1
        )
        bsz, r = u.shape[0], self.n_heads // self.ngroups
        x = x.reshape(bsz, self.n_heads, self.headdim)
        b = b.reshape(bsz, self.ngroups, self.d_state).repeat_interleave(r, dim=1)
        c = c.reshape(bsz, self.ngroups, self.d_state).repeat_interleave(r, dim=1)
        dt = F.softplus(dt + self.dt_bias)  # B H
        a = -torch.exp(self.A_log.float()).to(dt.dtype)
        y, ssm_state = ssd_step(x, dt * a, b, c, ssm_state, dt=dt, d=self.D)
        y = self.norm(y.reshape(bsz, self.d_inner), z)
        return self.out_proj(y), (window[..., 1:], ssm_state)


class Mamba2Layer(nn.Module):
    """Pre-norm residual block: ``x + dropout(mixer(rmsnorm(x)))``."""

    def __init__(self, config: Mamba2Config):
        super().__init__()
        self.norm = nn.RMSNorm(config.hidden, eps=1e-5)
        self.mixer = Mamba2Mixer(
            config.hidden, config.d_state, config.d_conv, config.expand, config.head_dim,
            config.ngroups, config.chunk_size, config.kernel,
        )
        self.dropout = nn.Dropout(config.dropout)

    def forward_with_state(
        self, x: torch.Tensor, state: LayerState | None = None, *, final_state: bool = True,
        outputs: int | None = None,
    ) -> tuple[torch.Tensor, LayerState]:
        y, state = self.mixer.forward_with_state(self.norm(x), state, final_state=final_state,
                                                 outputs=outputs)
        return x[:, x.shape[1] - y.shape[1] :] + self.dropout(y), state

    def step(self, x: torch.Tensor, state: LayerState) -> tuple[torch.Tensor, LayerState]:
        y, state = self.mixer.step(self.norm(x), state)
        return x + self.dropout(y), state


class Mamba2Backbone(nn.Module):
    """Stacked Mamba-2 layers and a final RMSNorm; a causal map ``[B, L, D] -> [B, L, D]``."""

    def __init__(self, config: Mamba2Config):
        super().__init__()
        self.layers = nn.ModuleList(Mamba2Layer(config) for _ in range(config.n_layers))
        self.norm = nn.RMSNorm(config.hidden, eps=1e-5)
        self.chunk_size = config.chunk_size
        self.segment_tokens = config.segment_tokens

    def blocks(self, batch: int, length: int) -> tuple[int, int]:
        """``(rows, steps)`` per block of the input scanned at once: about
        ``segment_tokens`` tokens, split across the batch first (rows are independent,
        so that costs nothing) and across time only when one row is longer than that
        (then the state is carried from block to block)."""
        if (not self.segment_tokens or torch.compiler.is_compiling()
                or torch.jit.is_tracing() or batch * length <= self.segment_tokens
                or self._dynamically_quantized()):
            return batch, length  # exported graphs stay one straight-line program
        if length <= self.segment_tokens:
            rows = max(1, self.segment_tokens // length)
            return math.ceil(batch / math.ceil(batch / rows)), length
        steps = max(self.chunk_size, self.segment_tokens)
        return 1, math.ceil(length / math.ceil(length / steps))

    def _dynamically_quantized(self) -> bool:
        """Dynamic int8 layers scale activations per tensor, so splitting a batch into blocks
        would change the numbers (and an exported trace, which has no blocks, would differ)."""
        return any(type(layer.mixer.in_proj) is not nn.Linear for layer in self.layers)

    def initial_state(
        self, batch: int, device: torch.device | None = None, dtype: torch.dtype = torch.float32
    ) -> list[LayerState]:
        device = device or next(self.parameters()).device
        return [layer.mixer.initial_state(batch, device, dtype) for layer in self.layers]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._forward(x, None, final_state=False)[0]

    def forward_last(self, x: torch.Tensor, outputs: int) -> torch.Tensor:
        """``forward(x)[:, -outputs:]`` (``outputs >= 0``), computing only that: the last
        layer's other steps are only scanned for the state they pass on."""
        if not 0 <= outputs <= x.shape[1]:
            raise ValueError(f"outputs must be in [0, {x.shape[1]}], got {outputs}")
        return self._forward(x, None, final_state=False, outputs=outputs)[0]

    def forward_with_state(
        self, x: torch.Tensor, states: Sequence[LayerState] | None = None
    ) -> tuple[torch.Tensor, list[LayerState]]:
        return self._forward(x, states, final_state=True)

    def _forward(
        self, x: torch.Tensor, states: Sequence[LayerState] | None, *, final_state: bool,
        outputs: int | None = None,
    ) -> tuple[torch.Tensor, list[LayerState]]:
        # GPUs have no cache to fit, only kernel launches to save: one block there
        rows, steps = (x.shape[0], x.shape[1]) if x.is_cuda else self.blocks(*x.shape[:2])
        if rows >= x.shape[0]:
            h, states = self._scan_in_time(x, states, steps, final_state, outputs)
            return self.norm(h), states
        outs, parts = [], []
        for r0 in range(0, x.shape[0], rows):
            part = None if states is None else [(c[r0:r0 + rows], s[r0:r0 + rows])
                                                for c, s in states]
            h, part = self._scan_in_time(x[r0:r0 + rows], part, steps, final_state, outputs)
            outs.append(h)
            parts.append(part)
        if not final_state:
            return self.norm(torch.cat(outs)), []
        merged = [(torch.cat([p[i][0] for p in parts]), torch.cat([p[i][1] for p in parts]))
                  for i in range(len(self.layers))]
        return self.norm(torch.cat(outs)), merged

    def _scan_in_time(
        self, x: torch.Tensor, states: Sequence[LayerState] | None, steps: int,
        final_state: bool = True, outputs: int | None = None,
    ) -> tuple[torch.Tensor, list[LayerState]]:
        """Time segments in order, each layer continuing from its state after the last one;
        ``final_state=False`` lets the last segment skip computing the state it returns, and
        ``outputs`` keeps only the last steps' output (the last layer computes no others)."""
        outs = []
        length = x.shape[1]
        first_out = 0 if outputs is None else length - outputs
        for start in range(0, length, steps):
            end = min(start + steps, length)
            h = x[:, start:end]
            keep = final_state or end < length
            new_states = []
            for i, layer in enumerate(self.layers):
                wanted = None
                if i == len(self.layers) - 1 and first_out > start:
                    wanted = max(0, end - first_out)
                h, s = layer.forward_with_state(h, None if states is None else states[i],
                                                final_state=keep, outputs=wanted)
                new_states.append(s)
            states = new_states
            outs.append(h)
        return (outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)), list(states or [])

    def step(
        self, x: torch.Tensor, states: Sequence[LayerState]
    ) -> tuple[torch.Tensor, list[LayerState]]:
        out_states = []
        for layer, s in zip(self.layers, states, strict=True):
            x, s = layer.step(x, s)
            out_states.append(s)
        return self.norm(x), out_states


class Mamba2Forecaster(nn.Module):
    """``forward(static [B,S], observed [B,T,F], known [B,T+H,K]) -> [B,H,Q]`` quantiles.

    ``T`` may differ from ``config.lookback`` (the scan does not care); ``H`` may not."""

    def __init__(self, config: Mamba2Config):
        super().__init__()
        self.config = config
        d = config.hidden
        self.history_proj = nn.Linear(config.n_observed + config.n_known, d)
        self.future_proj = nn.Linear(config.n_known, d) if config.n_known else None
        self.static_proj = nn.Linear(config.n_static, d) if config.n_static else None
        self.horizon_embedding = nn.Parameter(torch.randn(config.horizon, d) * 0.02)
        self.input_dropout = nn.Dropout(config.dropout)
        self.backbone = Mamba2Backbone(config)
        self.head = MonotoneQuantileHead(d, len(config.quantiles))

    def _check(self, static: torch.Tensor, observed: torch.Tensor, known: torch.Tensor) -> None:
        c = self.config
        if observed.dim() != 3 or observed.shape[-1] != c.n_observed:
            raise ValueError(f"observed must be [B, T, {c.n_observed}], got {tuple(observed.shape)}")
        bsz, t = observed.shape[:2]
        if static.shape != (bsz, c.n_static):
            raise ValueError(f"static must be [{bsz}, {c.n_static}], got {tuple(static.shape)}")
        if known.shape != (bsz, t + c.horizon, c.n_known):
            raise ValueError(
                f"known must be [{bsz}, T + H = {t + c.horizon}, {c.n_known}], got {tuple(known.shape)}"
            )

    def tokens(self, static: torch.Tensor, observed: torch.Tensor, known: torch.Tensor) -> torch.Tensor:
        """The ``[B, T + H, d_model]`` input sequence described in the module docstring."""
        self._check(static, observed, known)
        t = observed.shape[1]
        hist = self.history_proj(torch.cat([observed, known[:, :t]], dim=-1))
        fut = self.horizon_embedding.expand(observed.shape[0], -1, -1)
        if self.future_proj is not None:
            fut = fut + self.future_proj(known[:, t:])
        x = torch.cat([hist, fut], dim=1)
        if self.static_proj is not None:
            x = x + self.static_proj(static).unsqueeze(1)
        return self.input_dropout(x)

    def forward(self, static: torch.Tensor, observed: torch.Tensor, known: torch.Tensor) -> torch.Tensor:
        # the head reads tokens T - 1 .. T + H - 1 only: the backbone computes just those
        h = self.backbone.forward_last(self.tokens(static, observed, known), self.config.horizon + 1)
        return self.head(h[:, :1] + h[:, 1:])

    @torch.no_grad()
    def forward_recurrent(
        self, static: torch.Tensor, observed: torch.Tensor, known: torch.Tensor
    ) -> torch.Tensor:
        """The same forecast one token at a time through ``Mamba2Backbone.step``."""
        x = self.tokens(static, observed, known)
        states = self.backbone.initial_state(x.shape[0], x.device, x.dtype)
        outs = []
        for i in range(x.shape[1]):
            y, states = self.backbone.step(x[:, i], states)
            outs.append(y)
        t = observed.shape[1]
        return self.head(outs[t - 1].unsqueeze(1) + torch.stack(outs[t:], dim=1))
