"""The Mamba-2 layer: the token mixer (in-projection, causal depthwise conv, SSD scan,
gated RMSNorm, out-projection) and its pre-norm residual block, with a parallel path
(``forward`` / ``forward_with_state``) and a one-token ``step`` that match each other.
``models.mamba2.model`` stacks these into the backbone and the forecaster."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from models.mamba2.config import Mamba2Config
from models.mamba2.ssd import ssd_chunked, ssd_step

# (conv_state [B, conv_dim, d_conv - 1], ssm_state [B, heads, headdim, d_state]) per layer
LayerState = tuple[torch.Tensor, torch.Tensor]


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
def fused_scan() -> Callable[..., Any] | None:
    """The fused CUDA scan of ``mamba_ssm``, or ``None`` where it is not installed or cannot run."""
    try:  # local: mamba_ssm is an optional dependency (CUDA builds only)
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
        fused = fused_scan() if self.kernel == "auto" and u.is_cuda else None
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
