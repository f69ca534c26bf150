"""Dagster Config fields that delegate to the library, so every hyperparameter's default
is defined once, in the model's dataclass (``TrainConfig``, ``TFTConfig``, ``DQNConfig``,
...). A field with a size-profile ``section`` takes the active profile's value as its
default when a run's config is built (``foxhunt_pipeline.config.settings``), not when
this module is imported."""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any

from pydantic import Field

from foxhunt_pipeline.config.profiles import declare
from foxhunt_pipeline.config.settings import current_settings


def library_default(cls: type, name: str) -> Any:
    """The default of dataclass ``cls``'s field ``name``."""
    for f in fields(cls):
        if f.name == name:
            if f.default is not MISSING:
                return f.default
            if f.default_factory is not MISSING:
                return f.default_factory()
            raise ValueError(f"{cls.__name__}.{name} has no default")
    raise AttributeError(f"{cls.__name__} has no field {name!r}")


def delegated(cls: type, name: str, doc: str, *, section: str | None = None) -> Any:
    """A Config field defaulting to ``cls.name``; with ``section``, to the active size
    profile's ``section.name`` where it sets one."""
    return sized(section, name, library_default(cls, name), doc) if section \
        else Field(default=library_default(cls, name), description=doc)


def sized(section: str, key: str, full: Any, doc: str) -> Any:
    """A Config field defaulting to the active size profile's ``section.key``, else ``full``
    (looked up per run, so ``foxhunt materialize --profile`` counts after import too)."""
    declare(section, key)
    return Field(default_factory=lambda: current_settings().size_default(section, key, full),
                 description=f"{doc} Default: {full!r}, or the size profile's {section}.{key}.")
