"""The size profile a home was made for, stored in the home (``$FOXHUNT_HOME/profile``), so
``foxhunt ui`` and ``foxhunt materialize`` keep training at the size ``foxhunt demo`` chose
instead of falling back to full size; and a CPU-only machine is never sent into full-size
training by automation unless someone asked for it."""

from __future__ import annotations

import os
from pathlib import Path

from foxhunt_pipeline.basics.atomic import atomic_write
from foxhunt_pipeline.config.profiles import PROFILE_ENV, PROFILES

PROFILE_FILE = "profile"
CPU_PROFILE = "demo"


def stored_profile(home: Path) -> str | None:
    path = Path(home) / PROFILE_FILE
    if not path.exists():
        return None
    name = path.read_text().strip()
    if name not in PROFILES:
        raise ValueError(f"{path}: {name!r} is not a profile; choose one of {', '.join(PROFILES)}")
    return name


def store_profile(home: Path, name: str) -> None:
    if name not in PROFILES:
        raise ValueError(f"{name!r} is not a profile; choose one of {', '.join(PROFILES)}")
    atomic_write(Path(home) / PROFILE_FILE, lambda p: p.write_text(name + "\n"))


def resolve_profile(explicit: str | None, home: Path, *, has_gpu: bool) -> tuple[str, str]:
    """``(profile, why)``: an explicit ``--profile``, else ``$FOXHUNT_PROFILE``, else the
    home's stored profile, else ``default`` on a GPU machine and the CPU-sized ``demo``
    profile on one without (full size then needs an explicit ``--profile default``)."""
    if explicit:
        return explicit, "chosen with --profile"
    env = os.environ.get(PROFILE_ENV)
    if env:
        return env, f"from ${PROFILE_ENV}"
    stored = stored_profile(home)
    if stored:
        return stored, f"stored in {Path(home) / PROFILE_FILE}"
    if has_gpu:
        return "default", "no profile chosen or stored; a GPU is present"
    return CPU_PROFILE, (f"no GPU and no profile chosen: using the CPU-sized '{CPU_PROFILE}' profile "
                         "(pass --profile default for full-size training)")


def has_gpu() -> bool:
    try:
        import torch  # lazy: seconds to import, and the CLI asks this before any command runs

        return bool(torch.cuda.is_available())
    except Exception:
        return False
