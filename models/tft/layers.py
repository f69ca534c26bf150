"""The TFT's building blocks: gated linear units, gated residual networks, variable
selection with batched per-variable parameters, gate-add-norm and interpretable attention.

Each block has ``forward`` (the module path: training, export, quantization) and, where it
pays, ``fast`` (the same function in fewer fused ops, for the inference fast path in
``models.tft.model``); see that module's docstring for where the design departs from the paper.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# --- building blocks ---------------------------------------------------------

CHUNK_ELEMENTS = 1 << 20  # per-variable work is done in row chunks of about this many floats


def fast_linear(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)`` without the module-call overhead when ``layer`` is a plain Linear (a
    quantized replacement is called as a module)."""
    if type(layer) is nn.Linear and not (layer._forward_pre_hooks or layer._forward_hooks):
        return F.linear(x, layer.weight, layer.bias)
    return layer(x)  # hooks (int8 quantization finds the layers it may swap by them) still run


def fast_lstm(lstm: nn.Module, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
          ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """An eval-mode ``lstm(x, state)`` straight into the fused kernel ``nn.LSTM.forward``
    ends in, skipping its per-call Python checks (a quantized LSTM is called as a module).
    The CPU kernel takes strided (expanded) states; cuDNN refuses them ("hx is not
    contiguous"), so on CUDA they are made contiguous first."""
    if x.is_cuda:
        state = (state[0].contiguous(), state[1].contiguous())
    if (type(lstm) is nn.LSTM and not (lstm._forward_pre_hooks or lstm._forward_hooks)
            and not lstm.proj_size and not lstm.bidirectional):
        out, h, c = torch._VF.lstm(x, state, lstm._flat_weights, lstm.bias, lstm.num_layers,
                                   0.0, False, False, lstm.batch_first)
        return out, (h, c)
    return lstm(x, state)


def fast_layer_norm(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``norm(x)`` straight into ``F.layer_norm`` when ``norm`` is a plain LayerNorm (as ``fast_linear``)."""
    if type(norm) is nn.LayerNorm and not (norm._forward_pre_hooks or norm._forward_hooks):
        return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)
    return norm(x)


class GatedLinearUnit(nn.Module):
    """``sigmoid(W4 x + b4) * (W5 x + b5)`` (eq. 5), both maps in one matmul."""

    def __init__(self, d_in: int, d_out: int, dropout: float = 0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.proj = nn.Linear(d_in, 2 * d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        value, gate = self.proj(self.dropout(x)).chunk(2, dim=-1)
        return torch.sigmoid(gate) * value


class GatedResidualNetwork(nn.Module):
    """``LayerNorm(skip(a) + GLU(ELU(W2 a + W3 c + b2)))`` (eq. 2-4, W1 folded into GLU)."""

    def __init__(self, d_in: int, d_hidden: int, d_out: int, d_context: int | None = None,
                 dropout: float = 0.0, skip: nn.Module | None = None):
        super().__init__()
        self.fc_in = nn.Linear(d_in, d_hidden)
        self.fc_context = nn.Linear(d_context, d_hidden, bias=False) if d_context else None
        self.glu = GatedLinearUnit(d_hidden, d_out, dropout)
        if skip is None and d_in != d_out:
            skip = nn.Linear(d_in, d_out)
        self.skip = skip
        self.norm = nn.LayerNorm(d_out)

    def forward(self, a: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        hidden = self.fc_in(a)
        if context is not None:
            if self.fc_context is None:
                raise ValueError("this GRN was built without a context input")
            hidden = hidden + self.fc_context(context)
        residual = a if self.skip is None else self.skip(a)
        return self.norm(residual + self.glu(F.elu(hidden)))

    def fast(self, a: torch.Tensor, context_bias: torch.Tensor | None = None) -> torch.Tensor:
        """Inference-only ``forward`` with fewer ops; ``context_bias`` is
        :meth:`context_bias` of the context (added to ``fc_in(a)``, broadcasting)."""
        hidden = fast_linear(self.fc_in, a)
        if context_bias is not None:
            hidden = hidden + context_bias
        gated = F.glu(fast_linear(self.glu.proj, F.elu(hidden)), -1)
        if self.skip is None:
            residual = a
        elif type(self.skip) is PerVariableAffine:
            return fast_layer_norm(self.norm, torch.addcmul(gated, a, self.skip.scale)
                               .add_(self.skip.shift))
        else:
            residual = self.skip(a)
        return fast_layer_norm(self.norm, residual + gated)

    def context_bias(self, context: torch.Tensor) -> torch.Tensor:
        if self.fc_context is None:
            raise ValueError("this GRN was built without a context input")
        return fast_linear(self.fc_context, context)


class StackedGRN(nn.Module):
    """``n`` independent GRNs (no context) of the same input, run as one matmul, one
    ``baddbmm`` and one norm: the four static covariate encoders."""

    def __init__(self, n: int, d: int, dropout: float = 0.0):
        super().__init__()
        self.n, self.d = n, d
        self.fc_in = nn.Linear(d, n * d)
        self.dropout = nn.Dropout(dropout)
        bound = 1.0 / math.sqrt(d)
        self.glu_weight = nn.Parameter(torch.empty(n, d, 2 * d).uniform_(-bound, bound))
        self.glu_bias = nn.Parameter(torch.empty(n, 1, 2 * d).uniform_(-bound, bound))
        self.norm_weight = nn.Parameter(torch.ones(n, 1, d))
        self.norm_bias = nn.Parameter(torch.zeros(n, 1, d))

    def forward(self, a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(self.stacked(a).unbind(0))

    def stacked(self, a: torch.Tensor) -> torch.Tensor:
        """The ``n`` outputs as one ``[n, B, d]`` tensor."""
        hidden = F.elu(fast_linear(self.fc_in, a)).view(a.shape[0], self.n, self.d).transpose(0, 1)
        if self.training:
            hidden = self.dropout(hidden)
        gated = F.glu(torch.baddbmm(self.glu_bias, hidden, self.glu_weight), -1)
        return torch.addcmul(self.norm_bias, F.layer_norm(a + gated, (self.d,)), self.norm_weight)


class PerVariableAffine(nn.Module):
    """``x_v * a_v + b_v`` for every variable: the selection GRN's skip path."""

    def __init__(self, n_vars: int):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(n_vars))
        self.shift = nn.Parameter(torch.zeros(n_vars))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(self.shift, x, self.scale)


class VariableSelectionNetwork(nn.Module):
    """Eq. 6-8 over ``[B, T, V]`` real-valued inputs; returns ``([B, T, d_model], [B, T, V])``.

    Each variable ``v`` has its own linear embedding ``xi_v = x_v e_v + f_v`` (width
    ``width``), its own GRN of that width, and its own lift ``P_v`` to ``d_model``. As the
    embedding is affine in the scalar ``x_v``, the first linear layer of each per-variable
    GRN and of the selection GRN over the flattened ``Xi`` are affine maps of the raw
    inputs and are applied to ``x`` directly (an exact reparametrisation that removes a
    ``[B, T, V * width] x [V * width, d_model]`` matmul). The per-variable layer-norm gain
    is absorbed into ``P_v`` and its bias into ``lift_bias``. Per-variable work runs in a
    ``[V, width, B * T]`` layout so the GLU is a single ``baddbmm`` with no copies.
    """

    def __init__(self, n_vars: int, width: int, d_model: int, d_context: int | None,
                 dropout: float):
        super().__init__()
        self.n_vars, self.width = n_vars, width
        self.selector = GatedResidualNetwork(n_vars, d_model, n_vars, d_context, dropout,
                                             skip=PerVariableAffine(n_vars))
        self.embed_weight = nn.Parameter(torch.empty(n_vars, width, 1).uniform_(-1.0, 1.0))
        self.embed_bias = nn.Parameter(torch.empty(n_vars, width, 1).uniform_(-1.0, 1.0))
        self.pre_weight = nn.Parameter(torch.empty(n_vars, width, 1).uniform_(-1.0, 1.0))
        self.pre_bias = nn.Parameter(torch.empty(n_vars, width, 1).uniform_(-0.5, 0.5))
        bound = 1.0 / math.sqrt(width)
        self.glu_weight = nn.Parameter(torch.empty(n_vars, 2 * width, width).uniform_(-bound, bound))
        self.glu_bias = nn.Parameter(torch.empty(n_vars, 2 * width, 1).uniform_(-bound, bound))
        # stacked P_v: sum_v w_v P_v n_v is one [N, V * width] x [V * width, d_model] matmul
        self.lift = nn.Linear(n_vars * width, d_model)
        self.lift_bias = nn.Parameter(torch.zeros(n_vars, d_model))
        self.dropout = nn.Dropout(dropout)

    def process(self, x: torch.Tensor) -> torch.Tensor:
        """Per-variable GRN outputs (before the lift), ``[V, width, N]`` for ``x [N, V]``.

        Rows last: the layer norm then reduces over a short outer axis, which vectorises
        along ``N`` (a last-axis reduction over 4 floats is ~10x slower), and the lift
        reads the result as a ``[V * width, N]`` view without a copy."""
        xv = x.t().contiguous().unsqueeze(1)  # [V, 1, N]; contiguous: faster broadcasts
        emb = torch.addcmul(self.embed_bias, xv, self.embed_weight)
        hidden = F.elu(torch.addcmul(self.pre_bias, xv, self.pre_weight))
        gated = F.glu(torch.baddbmm(self.glu_bias, self.glu_weight, hidden), dim=1)
        y = emb + gated
        centred = y - y.mean(dim=1, keepdim=True)
        return centred * torch.rsqrt(centred.square().mean(dim=1, keepdim=True) + 1e-5)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        lead = x.shape[:-1]
        weights = torch.softmax(self.selector(x, context), dim=-1)  # [B, T, V]
        flat_x = x.reshape(-1, self.n_vars)  # [N, V]
        flat_w = weights.reshape(-1, self.n_vars)
        # Row chunks keep each [V, 2 * width, rows] intermediate around CHUNK_ELEMENTS, so
        # the allocator reuses cached blocks instead of mapping (and page-faulting) fresh
        # memory for every large batch; the result is identical.
        rows = max(1, CHUNK_ELEMENTS // (self.n_vars * 2 * self.width))
        if torch.compiler.is_exporting() or torch.jit.is_tracing() or torch.jit.is_scripting():
            rows = flat_x.shape[0]  # one chunk: a data-dependent loop would bake the batch in
        parts = []
        for start in range(0, flat_x.shape[0], rows):
            xc, wc = flat_x[start:start + rows], flat_w[start:start + rows]
            weighted = self.process(xc) * wc.t().unsqueeze(1)  # [V, width, n]
            parts.append(F.linear(weighted.reshape(-1, xc.shape[0]).t(), self.lift.weight,
                                  self.lift.bias))
        combined = (parts[0] if len(parts) == 1 else torch.cat(parts)) + flat_w @ self.lift_bias
        return self.dropout(combined).reshape(*lead, -1), weights

    def fast(self, x: torch.Tensor, context_bias: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """Inference-only ``forward`` (no dropout), the same function in fewer ops: the
        per-variable norm's scale and the selection weight are multiplied on the small
        ``[V, 1, N]`` tensor before touching the wide one, and the lift biases are added
        inside the matmuls. ``context_bias`` is the selector's
        :meth:`GatedResidualNetwork.context_bias` of the context."""
        lead = x.shape[:-1]
        weights = torch.softmax(self.selector.fast(x, context_bias), dim=-1)  # [B, T, V]
        flat_x = x.reshape(-1, self.n_vars)  # [N, V]
        flat_w = weights.reshape(-1, self.n_vars)
        rows = max(1, CHUNK_ELEMENTS // (self.n_vars * 2 * self.width))
        parts = []
        for start in range(0, flat_x.shape[0], rows):
            xc, wc = ((flat_x, flat_w) if rows >= flat_x.shape[0] else
                      (flat_x[start:start + rows], flat_w[start:start + rows]))
            n = xc.shape[0]
            xv = xc.t().contiguous().unsqueeze(1)  # [V, 1, n]
            emb = torch.addcmul(self.embed_bias, xv, self.embed_weight)
            hidden = F.elu(torch.addcmul(self.pre_bias, xv, self.pre_weight), inplace=True)
            y = torch.baddbmm(self.glu_bias, self.glu_weight, hidden)  # [V, 2 * width, n]
            y = torch.addcmul(emb, y[:, :self.width], torch.sigmoid(y[:, self.width:]))
            centred = y - y.mean(dim=1, keepdim=True)  # (var_mean over dim 1 is 50x slower)
            var = torch.mul(centred, centred).mean(dim=1, keepdim=True)  # [V, 1, n]
            weighted = centred.mul_(torch.rsqrt(var.add_(1e-5)).mul_(wc.t().unsqueeze(1)))
            lifted = torch.addmm(self.lift.bias, weighted.view(-1, n).t(), self.lift.weight.t())
            parts.append(torch.addmm(lifted, wc, self.lift_bias))
        combined = parts[0] if len(parts) == 1 else torch.cat(parts)
        return combined.reshape(*lead, -1), weights


class GateAddNorm(nn.Module):
    """Gated skip connection: ``LayerNorm(skip + GLU(x))`` (eq. 12, 15, 17)."""

    def __init__(self, d_model: int, dropout: float = 0.0):
        super().__init__()
        self.glu = GatedLinearUnit(d_model, d_model, dropout)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.norm(skip + self.glu(x))

    def fast(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        """Inference-only ``forward`` (no dropout, no module calls)."""
        return fast_layer_norm(self.norm, skip + F.glu(fast_linear(self.glu.proj, x), -1))


def causal_mask(n_past: int, n_future: int, device: torch.device | None = None) -> torch.Tensor:
    """``[n_future, n_past + n_future]`` bool mask, True where decoder step ``i`` must not
    look (positions after ``n_past + i``). Built from sequence lengths only."""
    query_pos = torch.arange(n_future, device=device).unsqueeze(1) + n_past
    key_pos = torch.arange(n_past + n_future, device=device).unsqueeze(0)
    return key_pos > query_pos


class InterpretableMultiHeadAttention(nn.Module):
    """Eq. 14-16: per-head query/key maps, one value map shared by all heads, so the
    head-averaged attention matrix is exactly what mixes the values."""

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0):
        super().__init__()
        self.heads = heads
        self.d_head = d_model // heads
        self.q = nn.Linear(d_model, heads * self.d_head)
        self.k = nn.Linear(d_model, heads * self.d_head)
        self.v = nn.Linear(d_model, self.d_head)
        self.out = nn.Linear(self.d_head, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        b, tq, _ = query.shape
        tk = key.shape[1]
        q = self.q(query).view(b, tq, self.heads, self.d_head).transpose(1, 2)
        k = self.k(key).view(b, tk, self.heads, self.d_head).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d_head)  # [B, heads, Tq, Tk]
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        averaged = self.dropout(attn.mean(dim=1))  # mean_h(A_h) V W_V == mean_h(A_h V W_V)
        return self.out(averaged @ self.v(key)), attn

    def fast(self, query: torch.Tensor, key: torch.Tensor, additive_mask: torch.Tensor
             ) -> torch.Tensor:
        """Inference-only ``forward`` without the per-head weights: ``additive_mask`` is 0
        where a query may look and ``-inf`` where not, added with the scale in one op."""
        b, tq, _ = query.shape
        tk = key.shape[1]
        q = fast_linear(self.q, query).view(b, tq, self.heads, self.d_head).transpose(1, 2)
        k = fast_linear(self.k, key).view(b, tk, self.heads, self.d_head).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-1, -2)).mul_(1.0 / math.sqrt(self.d_head))
        attn = torch.softmax(scores.add_(additive_mask), dim=-1)
        return fast_linear(self.out, attn.mean(dim=1) @ fast_linear(self.v, key))


# --- the model ---------------------------------------------------------------
