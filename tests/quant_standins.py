"""Small stand-ins with the layer types of the real models, for quantization / export tests."""

from __future__ import annotations

import torch
from torch import nn


class LSTMForecaster(nn.Module):
    """static [B,S], observed [B,T,F], known [B,T+H,K] -> quantiles [B,H,Q], like the TFT."""

    def __init__(self, n_static=5, n_observed=12, n_known=10, horizon=5, n_quantiles=9, hidden=64):
        super().__init__()
        self.horizon = horizon
        self.inp = nn.Linear(n_observed + n_known, hidden)
        self.lstm = nn.LSTM(hidden, hidden, num_layers=2, batch_first=True)
        self.static = nn.Linear(n_static, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Sequential(nn.Linear(hidden + n_known, hidden), nn.GELU(), nn.Linear(hidden, n_quantiles))

    def forward(self, static, observed, known):
        t = observed.shape[1]
        x = self.inp(torch.cat([observed, known[:, :t]], dim=-1))
        out, _ = self.lstm(x)
        h = self.norm(out[:, -1] + self.static(static))
        future = known[:, t:]
        h = h.unsqueeze(1).expand(-1, future.shape[1], -1)
        q = self.head(torch.cat([h, future], dim=-1))
        # monotone quantiles: first + cumulative softplus, as a real forecaster would
        return torch.cat([q[..., :1], q[..., :1] + torch.cumsum(nn.functional.softplus(q[..., 1:]), -1)], -1)


class ConvScanForecaster(nn.Module):
    """Linear + depthwise Conv1d + a sequential scan, like Mamba-2; same interface."""

    def __init__(self, n_static=5, n_observed=12, n_known=10, horizon=5, n_quantiles=9, hidden=32):
        super().__init__()
        self.horizon = horizon
        self.inp = nn.Linear(n_observed + n_known, hidden)
        self.conv = nn.Conv1d(hidden, hidden, kernel_size=4, groups=hidden, padding=3)
        self.decay = nn.Parameter(torch.full((hidden,), 0.9))
        self.static = nn.Linear(n_static, hidden)
        self.head = nn.Linear(hidden + n_known, n_quantiles)

    def forward(self, static, observed, known):
        t = observed.shape[1]
        x = self.inp(torch.cat([observed, known[:, :t]], dim=-1))
        x = self.conv(x.transpose(1, 2))[..., :t].transpose(1, 2)
        state = torch.zeros_like(x[:, 0])
        for i in range(t):
            state = torch.sigmoid(self.decay) * state + x[:, i]
        h = (state + self.static(static)).unsqueeze(1).expand(-1, known.shape[1] - t, -1)
        return self.head(torch.cat([h, known[:, t:]], dim=-1))


class MLPPolicy(nn.Module):
    """obs [B, D] -> logits over short / flat / long, like the DQN / PPO policy nets."""

    def __init__(self, obs_dim=64, hidden=128, n_actions=3):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_actions)
        )

    def forward(self, obs):
        return self.net(obs)


def forecaster_inputs(batch=8, lookback=60, horizon=5, n_static=5, n_observed=12, n_known=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(batch, n_static, generator=g),
        torch.randn(batch, lookback, n_observed, generator=g),
        torch.randn(batch, lookback + horizon, n_known, generator=g),
    )
