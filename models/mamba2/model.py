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
from collections.abc import Sequence

import torch
from torch import nn

from models.mamba2.config import Mamba2Config
from models.mamba2.mixer import LayerState, Mamba2Layer
from models.quantile import MonotoneQuantileHead


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
