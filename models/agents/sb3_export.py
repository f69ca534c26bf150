"""A trained SB3 agent as a plain ``PolicyNet``: loadable without unpickling, and SB3's
own ``model.zip`` beside it to resume training."""

from __future__ import annotations

import io
from pathlib import Path

import torch
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.base_class import BaseAlgorithm
from torch import nn

from foxhunt_pipeline.basics.atomic import atomic_write
from models.agents.learning import WindowFeaturesExtractor
from models.agents.policy import PolicyNet, activation_name, save_policy_net

SB3_FILE = "model.zip"


def policy_parts(model: BaseAlgorithm) -> tuple[str, WindowFeaturesExtractor, list[nn.Linear], type]:
    """(algo, features extractor, the head's Linear layers in order, activation) of a DQN / PPO."""
    policy = model.policy
    if isinstance(model, DQN):
        extractor = policy.q_net.features_extractor
        linears = [m for m in policy.q_net.q_net if isinstance(m, nn.Linear)]
        algo = "dqn"
    elif isinstance(model, PPO):
        extractor = policy.pi_features_extractor
        linears = [m for m in policy.mlp_extractor.policy_net if isinstance(m, nn.Linear)]
        linears.append(policy.action_net)
        algo = "ppo"
    else:
        raise TypeError(f"expected an SB3 DQN or PPO model, got {type(model).__name__}")
    if not isinstance(extractor, WindowFeaturesExtractor):
        raise TypeError(f"model was not built with WindowFeaturesExtractor ({type(extractor).__name__})")
    return algo, extractor, linears, policy.activation_fn


def policy_net_from_model(model: BaseAlgorithm) -> PolicyNet:
    """Copy the deterministic policy of an SB3 DQN/PPO model into a plain ``PolicyNet`` (CPU)."""
    algo, extractor, linears, act = policy_parts(model)
    net = PolicyNet(
        extractor.encoder.config(),
        [lin.out_features for lin in linears[:-1]],
        activation_name(act),
        algo=algo,
        meta=extractor.observation_meta,
    )
    net.state = extractor.state
    net.encoder.load_state_dict({k: v.detach().cpu() for k, v in extractor.encoder.state_dict().items()})
    mine = [m for m in net.head if isinstance(m, nn.Linear)]
    with torch.no_grad():
        for dst, src in zip(mine, linears, strict=True):
            dst.weight.copy_(src.weight.detach().cpu())
            dst.bias.copy_(src.bias.detach().cpu())
    return net.eval()


def save_policy(model: BaseAlgorithm, directory: str | Path) -> dict[str, Path]:
    """Write ``policy.safetensors`` + ``policy.json`` (loadable by ``load_policy`` without
    unpickling), the forecasters it observes (``state.json`` + ``forecasters/``) and SB3's
    ``model.zip`` (to resume training), each file atomically."""
    directory = Path(directory)
    paths = save_policy_net(policy_net_from_model(model), directory)
    buf = io.BytesIO()
    model.save(buf)
    paths["sb3"] = directory / SB3_FILE
    atomic_write(paths["sb3"], lambda p: p.write_bytes(buf.getvalue()))
    return paths
