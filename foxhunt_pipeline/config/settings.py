"""The one settings object: read from the environment once, when the code location
(``foxhunt_pipeline.definitions``) or the ``foxhunt`` command starts, never when a module
is imported. Size profiles are applied from it as run-config defaults when a run's
config is built, so a profile chosen after the definitions were imported still counts."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from foxhunt_pipeline.config.profiles import PROFILE_ENV, PROFILES


@dataclass(frozen=True)
class Settings:
    """What the environment says about this process's runs."""

    profile: str = "default"
    """Size profile (``default`` | ``demo`` | ``fast``): smaller training and evaluation."""

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"{PROFILE_ENV}={self.profile!r} is not a profile; choose one of "
                             f"{', '.join(PROFILES)}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        return cls(profile=env.get(PROFILE_ENV, "") or "default")

    def size_default(self, section: str, key: str, fallback: Any) -> Any:
        """The profile's value for ``section.key`` (an asset's config field), else
        ``fallback`` (the full-size default)."""
        return PROFILES[self.profile].get(section, {}).get(key, fallback)


_current: Settings | None = None


def load_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Read the settings from the environment (plus explicit ``overrides``, e.g. the CLI's
    ``--profile``) and make them this process's settings."""
    global _current
    _current = replace(Settings.from_env(environ), **overrides)
    return _current


def current_settings() -> Settings:
    """This process's settings; read from the environment on first use if no entry point
    loaded them (a run worker, a test)."""
    return _current if _current is not None else load_settings()
