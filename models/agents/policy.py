"""The agents' networks as plain torch modules, and their SB3-free checkpoint format.

``WindowEncoder`` turns the flat ``TradingEnv`` observation back into a ``[B, L, C]`` window
plus the position one-hot; SB3 uses it inside its features extractor, and ``PolicyNet`` (encoder
+ action head) reproduces the deterministic policy of a trained DQN (Q-values) or PPO (logits)
without SB3 or unpickling: weights in safetensors, architecture in JSON.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from foxhunt_pipeline.basics.atomic import atomic_write
from models.agents.state import ForecastState
from models.agents.trading_env import N_ACTIONS

POLICY_FORMAT_VERSION = 1
WEIGHTS_FILE = "policy.safetensors"
CONFIG_FILE = "policy.json"
ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh}


def activation_name(cls: type[nn.Module]) -> str:
    for name, c in ACTIVATIONS.items():
        if cls is c:
            return name
    raise ValueError(f"unsupported activation {cls.__name__}; use one of {sorted(ACTIVATIONS)}")


class WindowEncoder(nn.Module):
    """Flat observation -> features: an MLP over the flattened window, or two 1-D convolutions
    over time (summarised by the last step and the mean), each concatenated with the position
    one-hot so the head always sees the current position directly."""

    def __init__(
        self,
        lookback: int,
        n_channels: int,
        kind: str = "mlp",
        hidden: int = 64,
        conv_channels: int = 32,
        kernel_size: int = 3,
    ):
        super().__init__()
        if kind not in ("mlp", "conv"):
            raise ValueError(f"encoder kind must be 'mlp' or 'conv', got {kind!r}")
        if kernel_size % 2 != 1:
            raise ValueError(f"kernel_size must be odd, got {kernel_size}")
        self.lookback, self.n_channels, self.kind = int(lookback), int(n_channels), kind
        self.hidden = int(hidden)
        self.conv_channels, self.kernel_size = int(conv_channels), int(kernel_size)
        if kind == "mlp":
            self.body = nn.Sequential(nn.Linear(lookback * n_channels, hidden), nn.ReLU())
        else:
            pad = kernel_size // 2
            self.conv = nn.Sequential(
                nn.Conv1d(n_channels, conv_channels, kernel_size, padding=pad),
                nn.ReLU(),
                nn.Conv1d(conv_channels, conv_channels, kernel_size, padding=pad),
                nn.ReLU(),
            )
            self.body = nn.Sequential(nn.Linear(2 * conv_channels, hidden), nn.ReLU())

    @property
    def features_dim(self) -> int:
        return self.hidden + N_ACTIONS

    @property
    def obs_dim(self) -> int:
        return self.lookback * self.n_channels + N_ACTIONS

    def config(self) -> dict[str, Any]:
        return {
            "lookback": self.lookback,
            "n_channels": self.n_channels,
            "kind": self.kind,
            "hidden": self.hidden,
            "conv_channels": self.conv_channels,
            "kernel_size": self.kernel_size,
        }

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if obs.shape[-1] != self.obs_dim:
            raise ValueError(f"observation has {obs.shape[-1]} values, expected {self.obs_dim}")
        window, position = obs[:, : -N_ACTIONS], obs[:, -N_ACTIONS:]
        if self.kind == "mlp":
            z = self.body(window)
        else:
            x = window.reshape(-1, self.lookback, self.n_channels).transpose(1, 2)
            h = self.conv(x)
            z = self.body(torch.cat([h[:, :, -1], h.mean(dim=2)], dim=1))
        return torch.cat([z, position], dim=1)


def build_head(in_dim: int, hidden: Sequence[int], activation: str) -> nn.Sequential:
    """Same layer order as SB3's ``create_mlp`` + action layer, so weights copy one to one."""
    act = ACTIVATIONS[activation]
    layers: list[nn.Module] = []
    last = in_dim
    for h in hidden:
        layers += [nn.Linear(last, int(h)), act()]
        last = int(h)
    layers.append(nn.Linear(last, N_ACTIONS))
    return nn.Sequential(*layers)


class PolicyNet(nn.Module):
    """Observation batch ``[B, obs_dim]`` -> action scores ``[B, 3]`` (Q-values for DQN, logits
    for PPO); the deterministic action is the argmax in both cases."""

    def __init__(
        self,
        encoder: dict[str, Any],
        hidden: Sequence[int],
        activation: str,
        algo: str = "",
        meta: dict[str, Any] | None = None,
    ):
        super().__init__()
        self.encoder = WindowEncoder(**encoder)
        self.head = build_head(self.encoder.features_dim, hidden, activation)
        self.hidden = [int(h) for h in hidden]
        self.activation = activation
        self.algo = algo
        self.meta = dict(meta or {})
        # what it observes (the forecasters): a plain attribute, not part of its weights
        self.state: ForecastState | None = None

    @property
    def obs_dim(self) -> int:
        return self.encoder.obs_dim

    @property
    def device(self) -> torch.device:
        # int8 (dynamically quantized) layers keep packed weights, not parameters: default CPU
        for t in itertools.chain(self.parameters(), self.buffers()):
            return t.device
        return torch.device("cpu")

    def config(self) -> dict[str, Any]:
        return {
            "format_version": POLICY_FORMAT_VERSION,
            "algo": self.algo,
            "encoder": self.encoder.config(),
            "hidden": self.hidden,
            "activation": self.activation,
            "n_actions": N_ACTIONS,
            "action_positions": [-1, 0, 1],
            "meta": self.meta,
        }

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(obs))

    @torch.inference_mode()
    def act(self, obs: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        """Greedy actions (0 short, 1 flat, 2 long) for ``[B, obs_dim]`` or one ``[obs_dim]``
        observation (returned as ``[1]``). numpy in -> numpy out; a tensor stays on its device."""
        as_numpy = not isinstance(obs, torch.Tensor)
        x = torch.as_tensor(np.asarray(obs) if as_numpy else obs, dtype=torch.float32)
        if x.ndim == 1:
            x = x.unsqueeze(0)
        out = self.forward(x.to(self.device)).argmax(dim=1)
        return out.cpu().numpy() if as_numpy else out.to(obs.device)


def save_policy_net(net: PolicyNet, directory: str | os.PathLike[str]) -> dict[str, Path]:
    """Write weights (safetensors), architecture (JSON) and the forecasters it observes
    (``ForecastState.save``), each file atomically."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    weights = directory / WEIGHTS_FILE
    config = directory / CONFIG_FILE
    atomic_write(weights, lambda p: save_file(tensors, str(p), metadata={"format": "pt"}))
    atomic_write(config, lambda p: p.write_text(json.dumps(net.config(), indent=2)))
    paths = {"weights": weights, "config": config}
    if net.state is not None:
        paths["state"] = net.state.save(directory)
    return paths


def load_policy(directory: str | os.PathLike[str], device: str | torch.device = "cpu") -> PolicyNet:
    """Rebuild a ``PolicyNet`` (and the forecasters it observes) from ``save_policy``
    output: JSON + safetensors, no pickle."""
    directory = Path(directory)
    cfg_path = directory / CONFIG_FILE
    if not cfg_path.exists():
        raise FileNotFoundError(f"no {CONFIG_FILE} in {directory}")
    cfg = json.loads(cfg_path.read_text())
    if cfg.get("format_version") != POLICY_FORMAT_VERSION:
        raise ValueError(f"{cfg_path}: format_version {cfg.get('format_version')!r} is not supported")
    net = PolicyNet(cfg["encoder"], cfg["hidden"], cfg["activation"], cfg.get("algo", ""), cfg.get("meta"))
    state = load_file(str(directory / WEIGHTS_FILE))
    try:
        net.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise ValueError(f"{directory / WEIGHTS_FILE} does not match {cfg_path}: {e}") from e
    if cfg.get("meta", {}).get("observation") == "forecasts":
        if not ForecastState.exists(directory):
            raise ValueError(f"{directory}: the policy observes forecasts but its forecasters "
                             "(state.json, forecasters/) are missing")
        net.state = ForecastState.load(directory, device=device)
    return net.to(device).eval()


