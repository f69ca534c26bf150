"""Named run-config profiles: ``demo`` and ``fast`` shrink training so the whole graph runs on
two CPU cores in minutes; ``default`` uses each asset's own Config defaults."""

from __future__ import annotations

from typing import Any

PROFILES: dict[str, dict[str, dict[str, Any]]] = {
    "default": {},
    "demo": {},
    "fast": {},
}


def run_config_for(profile: str, keys) -> dict[str, Any]:
    try:
        configs = PROFILES[profile]
    except KeyError:
        raise ValueError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}") from None
    names = {k.to_user_string() for k in keys}
    ops = {name: {"config": cfg} for name, cfg in configs.items() if name in names}
    return {"ops": ops} if ops else {}
