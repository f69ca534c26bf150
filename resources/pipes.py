"""The Pipes client training assets use to launch ``torchrun`` (distributed training)."""

from __future__ import annotations

import dagster as dg

PIPES_RESOURCE_KEY = "pipes_subprocess_client"


def build_pipes_subprocess_client(
    env: dict[str, str] | None = None, termination_timeout_seconds: float = 60
) -> dg.PipesSubprocessClient:
    """stdio forwarded (rank output lands in the step's compute logs); on cancel, torchrun
    gets SIGINT and a minute to stop its ranks before the step gives up on it."""
    return dg.PipesSubprocessClient(
        env=env, forward_stdio=True, termination_timeout_seconds=termination_timeout_seconds
    )
