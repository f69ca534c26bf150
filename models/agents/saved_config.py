"""The agent's training config, saved beside its policy: a walk-forward retrains each fold
with exactly it, instead of parsing MLflow's string parameters back."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from foxhunt_pipeline.basics.atomic import atomic_write
from models.agents.configs import AgentConfig

AGENT_CONFIG_FILE = "agent_config.json"


def save_agent_config(config: AgentConfig, directory: str | os.PathLike[str]) -> Path:
    path = Path(directory) / AGENT_CONFIG_FILE
    atomic_write(path, lambda p: p.write_text(json.dumps(config.to_dict(), indent=2)))
    return path


def saved_agent_config(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The saved config as a plain dict (``DQNConfig.from_dict`` / ``PPOConfig.from_dict``
    take it), or ``None`` for a policy saved before configs were kept."""
    path = Path(directory) / AGENT_CONFIG_FILE
    return json.loads(path.read_text()) if path.exists() else None
