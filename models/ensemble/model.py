"""The ensemble forecaster: ``model(static, observed, known) -> [B, H, Q]``, the weighted
average of its members' quantiles (members with weight 0 are left out), plus optionally
the training split's climatology as one more member (a constant forecast that lets the
weights shrink towards the unconditional distribution). Its config holds the members'
configs, so a checkpoint rebuilds it through ``models.registry`` like any forecaster."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from models.registry import build_model, model_type_of


@dataclass
class EnsembleConfig:
    names: list[str]  # member names, e.g. "tft", "mamba2", "climatology"
    weights: list[float]
    members: list[dict[str, Any]]  # {"model_type", "config"} of each model member, in order
    horizon: int
    quantiles: tuple[float, ...]
    climatology: list[list[float]] | None = None  # [H, Q], weighted by names' "climatology"
    lookback: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.quantiles = tuple(float(q) for q in self.quantiles)
        if len(self.names) != len(self.weights):
            raise ValueError(f"EnsembleConfig: {len(self.names)} names, {len(self.weights)} weights")
        if any(w < 0 for w in self.weights) or abs(sum(self.weights) - 1.0) > 1e-6:
            raise ValueError(f"EnsembleConfig: weights must be >= 0 and sum to 1, got {self.weights}")
        models = [n for n in self.names if n != "climatology"]
        if len(models) != len(self.members):
            raise ValueError(f"EnsembleConfig: {len(models)} model names, {len(self.members)} configs")
        if "climatology" in self.names and self.climatology is None:
            raise ValueError("EnsembleConfig: a climatology weight needs the climatology quantiles")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["quantiles"] = list(self.quantiles)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EnsembleConfig:
        return cls(**d)


class QuantileEnsemble(nn.Module):
    def __init__(self, config: EnsembleConfig):
        super().__init__()
        self.config = config
        self.members = nn.ModuleList(build_model(m["model_type"], m["config"]) for m in config.members)
        weight = dict(zip(config.names, config.weights, strict=True))
        model_names = [n for n in config.names if n != "climatology"]
        self.register_buffer("member_weights", torch.tensor([weight[n] for n in model_names],
                                                            dtype=torch.float32))
        clim = torch.tensor(config.climatology or [[0.0] * len(config.quantiles)] * config.horizon,
                            dtype=torch.float32)
        self.register_buffer("climatology", clim * float(weight.get("climatology", 0.0)))

    def forward(self, static: torch.Tensor, observed: torch.Tensor, known: torch.Tensor) -> torch.Tensor:
        out = self.climatology.unsqueeze(0).expand(observed.shape[0], -1, -1)
        for w, member in zip(self.member_weights, self.members, strict=True):
            out = out + w * member(static, observed, known).float()
        return out


def build_ensemble(names: list[str], weights: dict[str, float], members: dict[str, nn.Module],
                   *, horizon: int, quantiles, climatology=None, lookback: int = 0) -> QuantileEnsemble:
    """The ensemble of the ``members`` (name -> trained module) with non-zero weight, their
    trained weights copied in."""
    kept = [n for n in names if weights.get(n, 0.0) > 0.0]
    models = [n for n in kept if n != "climatology"]
    config = EnsembleConfig(
        names=kept, weights=[float(weights[n]) for n in kept],
        members=[{"model_type": model_type_of(members[n]), "config": members[n].config.to_dict()}
                 for n in models],
        horizon=horizon, quantiles=tuple(quantiles), lookback=lookback,
        climatology=None if climatology is None or "climatology" not in kept
        else [[float(x) for x in row] for row in climatology])
    ensemble = QuantileEnsemble(config)
    for i, n in enumerate(models):
        ensemble.members[i].load_state_dict(members[n].state_dict())
    return ensemble.eval()
