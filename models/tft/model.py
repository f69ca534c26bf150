"""Temporal Fusion Transformer (Lim et al., 2021, "Temporal Fusion Transformers for
interpretable multi-horizon time series forecasting").

The architecture follows the paper block by block: per-variable input embeddings;
gated residual networks (GRN, eq. 2-5) with GLU and an optional context; variable
selection networks (VSN, eq. 6-8) for static, past (observed + known) and future
(known) inputs; four static covariate encoders (contexts for selection, enrichment,
LSTM h0 and c0); an LSTM encoder over the history and a decoder over the horizon
initialised from the static contexts; gated skip + add & norm; static enrichment;
interpretable multi-head attention (eq. 13-16: per-head Q/K, one shared V, heads
averaged) under a causal mask; a position-wise GRN; a final gated skip over the LSTM
output; and a quantile head.

Where this implementation departs from the paper, and why (all for speed and memory,
none changes what the model can express in a way that matters here):

* **Batched per-variable work.** Each variable keeps its own parameters, but they are
  stored as one tensor ``[V, d_out, d_in]`` and applied with one batched matmul
  (``baddbmm``) in a ``[V, width, B * T]`` layout, never a Python loop over variables
  (the reference loops; that loop is ~90% of its batch-1 time). The four static
  covariate encoders likewise run as one stacked GRN.
* **Per-variable width ``var_width`` (default 4) instead of ``d_model``.** The paper
  embeds every variable to ``d_model`` and runs a ``d_model``-wide GRN per variable,
  which materialises ``[B, T, V, d_model]`` tensors (with 251 inputs that is why the
  reference needs gigabytes to train). Here embeddings and per-variable GRNs have width
  ``var_width``, and each variable gets its own linear lift ``P_v: var_width ->
  d_model``. The VSN output ``sum_v w_v P_v xi_v`` is computed as one matmul of the
  weighted, flattened ``[B * T, V * var_width]`` tensor with the stacked ``P``, so no
  ``[B, T, V, d_model]`` tensor ever exists. This is the paper's VSN with each
  per-variable GRN replaced by ``P_v o GRN_v`` of width ``var_width``. Width 4 is
  plenty for one scalar input and halves the dominant per-variable tensors against
  pytorch-forecasting's default ``hidden_continuous_size=8``; the per-variable work runs
  in row chunks so large batches reuse cached memory.
* **Linear embeddings folded into the first layers.** Real-valued inputs are embedded
  linearly (as in the paper), so the first linear layer of every per-variable GRN and
  of the selection-weight GRN over the flattened embeddings ``Xi_t`` is an affine map of
  the raw inputs; it is applied to ``x`` directly (exact reparametrisation). The
  selection GRN's skip path is a per-variable affine map (the paper leaves the
  ``V * width -> V`` projection unspecified; a dense one would cost ``B T V^2 width``).
  Per-variable layer-norm gains fold into ``P_v``. Dropout of the per-variable GRNs is
  applied once to the VSN output rather than to ``V`` tensors of width ``var_width``.
* **GRN with W1 folded into the GLU.** In eq. 2-5, ``eta_1 = W1 eta_2 + b1`` feeds only
  the two linear maps of the GLU, so ``W1`` is folded into them (same function class,
  one matmul fewer); dropout sits before the GLU as in the paper.
* **Attention queries only at decoder positions.** Only decoder outputs feed the
  quantile head, so queries are computed for the ``H`` future steps against keys
  and values over all ``T + H`` steps; the causal mask (built from the sequence
  lengths) lets decoder step ``i`` see positions ``<= T + i``.
* **Static contexts shared across LSTM layers.** ``c_h`` / ``c_c`` initialise every
  layer of the 2-layer LSTM (the paper describes a single layer).
* **An inference fast path.** In eval mode without autograd (and outside export /
  tracing), ``forward`` runs ``_run_fast``: the same function as ``_run`` (within float
  rounding, tested against the old forward in ``tests/models/tft/test_tft_fast_path.py``) in fewer,
  fused ops, without module-call overhead and with the causal mask cached; batch-1
  latency is mostly per-op overhead. Hooked or quantized layers are still called as
  modules, so ``quantize_dynamic`` finds and swaps the same layers.
* **The reference implementation's initialisation** (``models.tft.init``: Keras's
  Glorot-uniform kernels, zero biases, orthogonal recurrent LSTM kernels, forget bias 1),
  not PyTorch's layer defaults, under which the model did not learn the sign of returns
  within a demo-sized budget.
* **Non-crossing quantiles.** A base quantile plus cumulative softplus increments
  (``models.quantile``) instead of ``Q`` independent linear outputs.
* **Per-window target scaling** (DeepAR's scale, pytorch-forecasting's encoder
  normaliser), when ``output_scale_input`` is set: the quantiles are multiplied by the
  root mean square of that observed input (the 1-bar return) over the last
  ``output_scale_bars`` bars, so the network forecasts in units of recent volatility.
  Without it the band moved too little with volatility (on the walk-forward protocol,
  wider than LightGBM's in calm windows, no wider in wild ones), and LightGBM beat it on
  pinball, all of it lost in the US session's volatile hours.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from torch import nn

from foxhunt_pipeline.basics.config_fields import check_known_fields
from models.quantile import MonotoneQuantileHead
from models.tft.init import reference_init
from models.tft.layers import (
    GateAddNorm,
    GatedResidualNetwork,
    InterpretableMultiHeadAttention,
    StackedGRN,
    VariableSelectionNetwork,
    causal_mask,
    fast_lstm,
)
from models.windows import DEFAULT_QUANTILES


@dataclass
class TFTConfig:
    """Sizes of a TFT; ``to_dict`` / ``from_dict`` round-trip through JSON."""

    n_static: int
    n_observed: int
    n_known: int
    lookback: int = 60
    horizon: int = 5
    quantiles: tuple[float, ...] = field(default_factory=lambda: tuple(DEFAULT_QUANTILES))
    hidden: int = 64
    heads: int = 4
    lstm_layers: int = 2
    dropout: float = 0.1
    var_width: int = 4
    # observed input whose RMS over the last output_scale_bars multiplies the quantiles
    # (None: no scaling, as checkpoints saved before it); the dataset sets it
    output_scale_input: int | None = None
    output_scale_bars: int = 60
    output_scale_floor: float = 0.1
    # > 1: a deep ensemble of that many TFTs of these sizes, each with its own initial
    # weights and dropout, whose quantiles are averaged (see TemporalFusionTransformer)
    members: int = 1

    def __post_init__(self) -> None:
        self.quantiles = tuple(float(q) for q in self.quantiles)
        for name in ("n_static", "n_observed", "n_known", "lookback", "horizon", "hidden",
                     "heads", "lstm_layers", "var_width", "output_scale_bars", "members"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"TFTConfig.{name} must be an int, got {value!r}")
        for name in ("n_static", "n_observed", "n_known"):
            if getattr(self, name) < 0:
                raise ValueError(f"TFTConfig.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("lookback", "horizon", "hidden", "heads", "lstm_layers", "var_width",
                     "output_scale_bars", "members"):
            if getattr(self, name) < 1:
                raise ValueError(f"TFTConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.n_observed + self.n_known < 1:
            raise ValueError("TFTConfig needs at least one observed or known input")
        if self.hidden % self.heads:
            raise ValueError(f"TFTConfig.hidden ({self.hidden}) must divide by heads ({self.heads})")
        if not self.quantiles or any(not 0.0 < q < 1.0 for q in self.quantiles):
            raise ValueError(f"TFTConfig.quantiles must lie in (0, 1), got {self.quantiles}")
        if list(self.quantiles) != sorted(set(self.quantiles)):
            raise ValueError(f"TFTConfig.quantiles must be strictly increasing: {self.quantiles}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"TFTConfig.dropout must lie in [0, 1), got {self.dropout}")
        self._check_output_scale()

    def _check_output_scale(self) -> None:
        i = self.output_scale_input
        if i is not None and (isinstance(i, bool) or not isinstance(i, int)
                              or not 0 <= i < self.n_observed):
            raise ValueError(f"TFTConfig.output_scale_input must be None or an observed input "
                             f"index in [0, {self.n_observed}), got {i!r}")
        if not self.output_scale_floor > 0.0:
            raise ValueError(f"TFTConfig.output_scale_floor must be > 0, "
                             f"got {self.output_scale_floor!r}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["quantiles"] = list(self.quantiles)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TFTConfig:
        check_known_fields(cls, d)
        return cls(**d)


class TemporalFusionTransformer(nn.Module):
    """``forward(static [B, S], observed [B, T, F], known [B, T + H, K]) -> [B, H, Q]``.

    With ``config.members = M > 1`` the module is a deep ensemble (Lakshminarayanan et al.
    2017): ``M`` TFTs of the same sizes (``self.members``), each with its own initial
    weights and dropout, whose quantiles are averaged (a mean of non-crossing quantiles
    stays non-crossing). ``models.training.loop.train_forecaster`` trains the members apart,
    each as one TFT with its own seed; checkpoints, export, quantization and interpretation
    see the one averaged model. On the walk-forward protocol two members forecast with a
    lower pinball than either alone (docs/models.md, "foxhunt-tft as a deep ensemble")."""

    def __init__(self, config: TFTConfig):
        super().__init__()
        self.config = config
        c = config
        d, w, p = c.hidden, c.var_width, c.dropout
        self.register_buffer("quantiles", torch.tensor(c.quantiles, dtype=torch.float32),
                             persistent=False)
        if c.members > 1:
            single = replace(c, members=1)
            self.members = nn.ModuleList(TemporalFusionTransformer(single)
                                         for _ in range(c.members))
            return
        self.static_vsn = (VariableSelectionNetwork(c.n_static, w, d, None, p)
                           if c.n_static else None)
        if self.static_vsn is None:
            self.static_default = nn.Parameter(torch.zeros(d))
        # contexts for variable selection, enrichment, LSTM h0 and LSTM c0
        self.static_encoders = StackedGRN(4, d, p)
        self.past_vsn = VariableSelectionNetwork(c.n_observed + c.n_known, w, d, d, p)
        self.future_vsn = (VariableSelectionNetwork(c.n_known, w, d, d, p) if c.n_known else None)
        if self.future_vsn is None:
            self.future_default = nn.Parameter(torch.zeros(d))
        lstm_dropout = p if c.lstm_layers > 1 else 0.0
        self.encoder = nn.LSTM(d, d, c.lstm_layers, batch_first=True, dropout=lstm_dropout)
        self.decoder = nn.LSTM(d, d, c.lstm_layers, batch_first=True, dropout=lstm_dropout)
        self.lstm_gate = GateAddNorm(d, p)
        self.enrichment = GatedResidualNetwork(d, d, d, d_context=d, dropout=p)
        self.attention = InterpretableMultiHeadAttention(d, c.heads, p)
        self.attention_gate = GateAddNorm(d, p)
        self.positionwise = GatedResidualNetwork(d, d, d, dropout=p)
        self.output_gate = GateAddNorm(d, 0.0)
        self.head = MonotoneQuantileHead(d, len(c.quantiles))
        self._mask_cache: dict[tuple[int, torch.device, torch.dtype], torch.Tensor] = {}
        reference_init(self)

    def forward(self, static: torch.Tensor, observed: torch.Tensor, known: torch.Tensor
                ) -> torch.Tensor:
        if self.config.members > 1:
            return torch.stack([m(static, observed, known) for m in self.members]).mean(dim=0)
        if self._can_run_fast():
            return self._run_fast(static, observed, known)
        return self._run(static, observed, known, interpret=False)[0]

    def _can_run_fast(self) -> bool:
        """The inference path needs no autograd, no dropout and no tracer: under
        export / tracing / scripting the reference path is what gets recorded."""
        return not (self.training or torch.is_grad_enabled() or torch.compiler.is_exporting()
                    or torch.jit.is_tracing() or torch.jit.is_scripting())

    def _additive_mask(self, n_past: int, device: torch.device, dtype: torch.dtype
                       ) -> torch.Tensor:
        """:func:`causal_mask` as 0 / -inf, cached per (length, device, dtype)."""
        key = (n_past, device, dtype)
        cache = self.__dict__.setdefault("_mask_cache", {})  # also on models unpickled from old
        mask = cache.get(key)
        if mask is None:
            allowed = torch.zeros(self.config.horizon, n_past + self.config.horizon,
                                  device=device, dtype=dtype)
            mask = allowed.masked_fill_(causal_mask(n_past, self.config.horizon, device),
                                        float("-inf"))
            cache[key] = mask
        return mask

    def forward_with_interpretation(
        self, static: torch.Tensor, observed: torch.Tensor, known: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Quantiles plus ``static_weights [B, S]``, ``past_weights [B, T, F + K]``
        (observed then known), ``future_weights [B, H, K]``, ``attention [B, H, T + H]``
        (head-averaged) and ``attention_per_head [B, heads, H, T + H]``; of a deep ensemble,
        the members' means (each member's selection weights sum to 1, so do their means)."""
        if self.config.members > 1:
            runs = [m._run(static, observed, known, interpret=True) for m in self.members]
            info = {key: torch.stack([i[key] for _, i in runs]).mean(dim=0) for key in runs[0][1]}
            return torch.stack([out for out, _ in runs]).mean(dim=0), info
        out, info = self._run(static, observed, known, interpret=True)
        return out, info

    def _check_shapes(self, static: torch.Tensor, observed: torch.Tensor, known: torch.Tensor
                      ) -> tuple[int, int]:
        c = self.config
        if static.dim() != 2 or static.shape[1] != c.n_static:
            raise ValueError(f"static must be [B, {c.n_static}], got {list(static.shape)}")
        if observed.dim() != 3 or observed.shape[2] != c.n_observed:
            raise ValueError(f"observed must be [B, T, {c.n_observed}], got {list(observed.shape)}")
        b, t = observed.shape[:2]
        if known.dim() != 3 or known.shape[1] != t + c.horizon or known.shape[2] != c.n_known:
            raise ValueError(f"known must be [B, T + H = {t + c.horizon}, {c.n_known}], "
                             f"got {list(known.shape)}")
        if static.shape[0] != b or known.shape[0] != b:
            raise ValueError(f"batch sizes differ: static {static.shape[0]}, observed {b}, "
                             f"known {known.shape[0]}")
        return b, t

    def _run(self, static: torch.Tensor, observed: torch.Tensor, known: torch.Tensor,
             interpret: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        b, t = self._check_shapes(static, observed, known)
        c = self.config
        info: dict[str, torch.Tensor] = {}

        if self.static_vsn is not None:
            static_emb, static_w = self.static_vsn(static.unsqueeze(1))
            static_emb = static_emb.squeeze(1)
            if interpret:
                info["static_weights"] = static_w.squeeze(1)
        else:
            static_emb = self.static_default.expand(b, -1)
        ctx_select, ctx_enrich, ctx_h, ctx_c = self.static_encoders(static_emb)
        h0 = ctx_h.unsqueeze(0).expand(c.lstm_layers, -1, -1).contiguous()
        c0 = ctx_c.unsqueeze(0).expand(c.lstm_layers, -1, -1).contiguous()

        past_inputs = torch.cat([observed, known[:, :t]], dim=-1)
        past, past_w = self.past_vsn(past_inputs, ctx_select.unsqueeze(1))
        if self.future_vsn is not None:
            future, future_w = self.future_vsn(known[:, t:], ctx_select.unsqueeze(1))
            if interpret:
                info["future_weights"] = future_w
        else:
            future = self.future_default.expand(b, c.horizon, -1)
        if interpret:
            info["past_weights"] = past_w

        enc_out, state = self.encoder(past, (h0, c0))
        dec_out, _ = self.decoder(future, state)
        lstm_out = torch.cat([enc_out, dec_out], dim=1)
        selected = torch.cat([past, future], dim=1)
        temporal = self.lstm_gate(lstm_out, selected)  # phi-tilde, [B, T + H, d]

        enriched = self.enrichment(temporal, ctx_enrich.unsqueeze(1))
        query = enriched[:, t:]
        mask = causal_mask(t, c.horizon, device=enriched.device)
        attended, attn = self.attention(query, enriched, mask)
        if interpret:
            info["attention_per_head"] = attn
            info["attention"] = attn.mean(dim=1)
        gated = self.attention_gate(attended, query)
        decoded = self.output_gate(self.positionwise(gated), temporal[:, t:])
        return self._scaled(self.head(decoded), observed), info

    def _scaled(self, quantiles: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
        """``quantiles`` times the window's scale (a positive factor keeps them ordered)."""
        c = self.config
        if c.output_scale_input is None:
            return quantiles
        recent = observed[:, -c.output_scale_bars:, c.output_scale_input]
        scale = torch.sqrt(recent.square().mean(dim=1) + c.output_scale_floor ** 2)
        return quantiles * scale[:, None, None]

    def _run_fast(self, static: torch.Tensor, observed: torch.Tensor, known: torch.Tensor
                  ) -> torch.Tensor:
        """:meth:`_run` for inference (eval mode, no grad), the same function in fewer and
        fused ops and without module-call overhead: what makes batch-1 latency."""
        b, t = self._check_shapes(static, observed, known)
        c = self.config
        if self.static_vsn is not None:
            static_emb = self.static_vsn.fast(static)[0]
        else:
            static_emb = self.static_default.expand(b, -1)
        contexts = self.static_encoders.stacked(static_emb)  # [4, B, d]
        ctx_select, ctx_enrich = contexts[0].unsqueeze(1), contexts[1].unsqueeze(1)
        h0 = contexts[2:3].expand(c.lstm_layers, -1, -1)  # the kernel takes strided states
        c0 = contexts[3:4].expand(c.lstm_layers, -1, -1)

        past_inputs = torch.cat([observed, known[:, :t]], dim=-1)
        past = self.past_vsn.fast(past_inputs, self.past_vsn.selector.context_bias(ctx_select))[0]
        if self.future_vsn is not None:
            future = self.future_vsn.fast(
                known[:, t:], self.future_vsn.selector.context_bias(ctx_select))[0]
        else:
            future = self.future_default.expand(b, c.horizon, -1)

        enc_out, state = fast_lstm(self.encoder, past, (h0, c0))
        dec_out, _ = fast_lstm(self.decoder, future, state)
        temporal = self.lstm_gate.fast(torch.cat([enc_out, dec_out], dim=1),
                                       torch.cat([past, future], dim=1))
        enrichment = self.enrichment
        enriched = enrichment.fast(temporal, enrichment.context_bias(ctx_enrich))
        query = enriched[:, t:]
        mask = self._additive_mask(t, enriched.device, enriched.dtype)
        gated = self.attention_gate.fast(self.attention.fast(query, enriched, mask), query)
        decoded = self.output_gate.fast(self.positionwise.fast(gated), temporal[:, t:])
        return self._scaled(self.head(decoded), observed)
