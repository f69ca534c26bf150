"""Model types by name, so a checkpoint's ``model_type`` string rebuilds its model.

Entries are resolved on lookup, so importing one forecaster never imports the other (the
model families are independent packages).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from models.windows import DEFAULT_QUANTILES

# the 1-bar log return, normalised like every input: a family whose config has
# ``output_scale_input`` forecasts in units of its recent root mean square
SCALE_INPUT = "f_ret_1b"

# name -> (module, config class, model class)
_SPECS: dict[str, tuple[str, str, str]] = {
    "tft": ("models.tft.model", "TFTConfig", "TemporalFusionTransformer"),
    "mamba2": ("models.mamba2.model", "Mamba2Config", "Mamba2Forecaster"),
    "ensemble": ("models.ensemble.model", "EnsembleConfig", "QuantileEnsemble"),
}


class _LazyModelTypes(Mapping[str, tuple[type, type[nn.Module]]]):
    """``MODEL_TYPES[name] -> (ConfigClass, ModelClass)``, importing the module on first use."""

    def __getitem__(self, name: str) -> tuple[type, type[nn.Module]]:
        try:
            module_name, config_name, model_name = _SPECS[name]
        except KeyError:
            raise KeyError(f"unknown model type {name!r}; known: {sorted(_SPECS)}") from None
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise KeyError(f"model type {name!r} needs {module_name}, which failed to import: "
                           f"{exc}") from exc
        return getattr(module, config_name), getattr(module, model_name)

    def __iter__(self) -> Iterator[str]:
        return iter(_SPECS)

    def __len__(self) -> int:
        return len(_SPECS)


MODEL_TYPES: Mapping[str, tuple[type, type[nn.Module]]] = _LazyModelTypes()


def get_model_class(name: str) -> tuple[type, type[nn.Module]]:
    """``(ConfigClass, ModelClass)`` registered under ``name``."""
    return MODEL_TYPES[name]


def build_model(name: str, config_dict: dict[str, Any]) -> nn.Module:
    """A freshly initialised model of type ``name`` from its ``config.to_dict()``."""
    config_cls, model_cls = get_model_class(name)
    return model_cls(config_cls.from_dict(dict(config_dict)))


def dataset_model_config(name: str, meta: Mapping[str, Any]) -> dict[str, Any]:
    """The config fields a dataset (its ``meta``) fixes for model type ``name``: input
    widths, lookback, horizon, quantiles, and the scale input where the family has one.
    Every builder of a forecaster for a dataset starts from this, so none can forget one."""
    observed = list(meta["observed_names"])
    config: dict[str, Any] = {
        "n_static": len(meta["static_names"]), "n_observed": len(observed),
        "n_known": len(meta["known_names"]), "lookback": int(meta["lookback"]),
        "horizon": int(meta["horizon"]),
        "quantiles": list(meta.get("quantiles", DEFAULT_QUANTILES)),
    }
    config_fields = {f.name for f in dataclasses.fields(get_model_class(name)[0])}
    if "output_scale_input" in config_fields and SCALE_INPUT in observed:
        config["output_scale_input"] = observed.index(SCALE_INPUT)
    return config


def seeded_model(name: str, config_dict: dict[str, Any], seed: int) -> nn.Module:
    """``build_model`` with its initial weights drawn after ``torch.manual_seed(seed)``: the
    same training config gives the same model in every process (torch seeds itself at random
    per process)."""
    torch.manual_seed(int(seed))
    return build_model(name, config_dict)


def model_type_of(model: nn.Module) -> str:
    """The registered name of ``model``'s class (for saving checkpoints)."""
    for name, (module_name, _, model_name) in _SPECS.items():
        cls = type(model)
        if cls.__name__ == model_name and cls.__module__ == module_name:
            return name
    raise KeyError(f"{type(model).__qualname__} is not a registered model type")
