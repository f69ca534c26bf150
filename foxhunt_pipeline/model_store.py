"""Which checkpoint is current for each model family: a small JSON pointer per family,
replaced atomically, so evaluation and quantization read exactly what training published."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

FAMILIES = ("tft", "mamba2", "dqn", "ppo")
REGISTERED_NAMES = {f: f"foxhunt-{f}" for f in FAMILIES}


def pointer_path(checkpoints: Path, family: str) -> Path:
    return checkpoints / family / "current.json"


def publish(checkpoints: Path, family: str, record: dict[str, Any]) -> Path:
    path = pointer_path(checkpoints, family)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".current.", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=2, default=str)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def current(checkpoints: Path, family: str) -> dict[str, Any]:
    path = pointer_path(checkpoints, family)
    if not path.exists():
        raise FileNotFoundError(
            f"no trained {family} model under {path.parent}: materialize the {family} training asset first"
        )
    return json.loads(path.read_text())
