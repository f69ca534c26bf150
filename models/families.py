"""The model families, one typed entry each: what a family is, what it trains, what it
outputs, what the walk-forward retrains per fold and the name it is registered under.

Assets, evaluation, tuning, quantization, the leaderboard and serving read this registry
instead of testing family names, so adding a family is one module (its model and training)
plus one entry here. Entries name their callables and classes as ``"module:attribute"`` and
resolve them on use: importing the registry never imports a family's code (the families are
independent packages, and stable-baselines3 is slow to import).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["forecaster", "agent"]


@dataclass(frozen=True)
class Family:
    name: str
    #: forecaster: quantiles [B, H, Q] of the forward log returns; agent: short/flat/long
    kind: Kind
    #: the Dagster asset that trains the production model
    asset: str
    #: the library dataclass of what it trains ("module:Class")
    config: str
    #: ``(family, checkpoint, settings, *, device, cache_dir) -> Candidate``: the production
    #: model's configuration retrained on each walk-forward fold ("module:function")
    candidate: str
    #: the model type its torch checkpoint records (``models.registry``), if it has one
    model_type: str | None = None
    #: ``(checkpoint, device=...) -> (model, meta)`` of a forecaster's production model
    loader: str | None = "models.training.checkpoint:load_checkpoint"
    #: the agents' training function ("module:function")
    train: str | None = None
    #: forecasters it combines (the ensemble) or observes (the agents)
    members: tuple[str, ...] = ()
    quantizable: bool = True
    tunable: bool = False
    #: prefix of its training config among its MLflow run's params (older checkpoints carry
    #: none of their own)
    logged_params: str | None = None

    @property
    def registered_name(self) -> str:
        """The MLflow registered model (and the walk-forward candidate's name)."""
        return f"foxhunt-{self.name}"

    @property
    def evaluation_asset(self) -> str:
        return f"{self.name}_evaluation"

    @property
    def combines(self) -> bool:
        """A forecaster made of other forecasters (the ensemble)."""
        return self.kind == "forecaster" and bool(self.members)

    def resolve(self, attribute: str) -> Any:
        """The class or function ``attribute`` names."""
        ref = getattr(self, attribute)
        if not ref:
            raise AttributeError(f"family {self.name!r} has no {attribute}")
        module, _, name = ref.partition(":")
        return getattr(importlib.import_module(module), name)

    def config_class(self) -> type:
        return self.resolve("config")

    def train_function(self) -> Callable[..., Any]:
        return self.resolve("train")

    def load(self, checkpoint: Any, device: Any = "cpu") -> tuple[Any, dict[str, Any]]:
        """A forecaster's production model and its meta, from its checkpoint."""
        return self.resolve("loader")(checkpoint, device=device)


_FORECASTER_CANDIDATE = "models.evaluation.family_candidates:forecaster_from_checkpoint"
_AGENT_CANDIDATE = "models.evaluation.family_candidates:agent_from_checkpoint"

REGISTRY: dict[str, Family] = {f.name: f for f in (
    Family("tft", "forecaster", "tft_model", "models.tft.model:TFTConfig",
           _FORECASTER_CANDIDATE, model_type="tft", tunable=True, logged_params="train"),
    Family("mamba2", "forecaster", "mamba2_model", "models.mamba2.model:Mamba2Config",
           _FORECASTER_CANDIDATE, model_type="mamba2", tunable=True, logged_params="train"),
    Family("lightgbm", "forecaster", "lightgbm_model",
           "models.lightgbm.model:LightGBMConfig",
           "models.evaluation.family_candidates:lightgbm_from_artifact", quantizable=False,
           loader="models.lightgbm.artifact:load_lightgbm"),
    Family("dqn", "agent", "dqn_agent", "models.agents.configs:DQNConfig", _AGENT_CANDIDATE,
           train="models.agents.dqn:train_dqn", members=("tft", "mamba2"), tunable=True,
           logged_params="agent", loader=None),
    Family("ppo", "agent", "ppo_agent", "models.agents.configs:PPOConfig", _AGENT_CANDIDATE,
           train="models.agents.ppo:train_ppo", members=("tft", "mamba2"), tunable=True,
           logged_params="agent", loader=None),
    Family("ensemble", "forecaster", "ensemble_model", "models.ensemble.model:EnsembleConfig",
           "models.evaluation.family_candidates:ensemble_from_members", model_type="ensemble",
           members=("tft", "mamba2")),
)}


def family(name: str) -> Family:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown model family {name!r}; known: {', '.join(REGISTRY)}") from None


def names(*, kind: Kind | None = None, tunable: bool | None = None,
          quantizable: bool | None = None) -> tuple[str, ...]:
    """Family names in registry order, filtered by the given attributes."""
    return tuple(f.name for f in REGISTRY.values()
                 if (kind is None or f.kind == kind)
                 and (tunable is None or f.tunable == tunable)
                 and (quantizable is None or f.quantizable == quantizable))


def by_registered_name(registered: str) -> Family:
    """The family registered as ``registered`` (``foxhunt-tft`` -> tft)."""
    for f in REGISTRY.values():
        if f.registered_name == registered:
            return f
    raise KeyError(f"no model family is registered as {registered!r}")


ALL = names()
FORECASTERS = names(kind="forecaster")
AGENTS = names(kind="agent")
