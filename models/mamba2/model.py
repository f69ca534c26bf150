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

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from models.config_fields import check_known_fields
from models.mamba2.mixer import LayerState, Mamba2Layer
from models.quantile import MonotoneQuantileHead
from models.windows import DEFAULT_QUANTILES

KERNELS = ("torch", "auto")



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
        check_known_fields(cls, d)
        return cls(**dict(d))


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
