"""The training assets' hyperparameters: the run config's explicit values, else the best
trial of the family's newest study (``tuning`` group), else the Config's defaults."""

from __future__ import annotations

from typing import TypeVar

import dagster as dg

from models.tuning.spaces import to_config_values
from models.tuning.study import newest_best
from resources.storage import FoxhuntStorage

C = TypeVar("C", bound=dg.Config)


def with_tuned_params(family: str, config: C, storage: FoxhuntStorage) -> tuple[C, str]:
    """``config`` with the newest study's best parameters for every field the run config
    did not set, and a sentence saying where the values came from (for metadata)."""
    if not getattr(config, "use_tuned", True):
        return config, "Config (use_tuned=false)"
    url = storage.paths.optuna_storage_url
    try:
        best = newest_best(url, family)
    except Exception as e:  # an unreachable study database must not stop training
        return config, f"Config defaults (studies unreadable: {type(e).__name__}: {e})"
    if best is None:
        return config, "Config defaults (no finished study)"
    values = to_config_values(best.params)
    fields = type(config).model_fields
    kept = sorted(k for k in values if k in config.model_fields_set)
    update = {k: v for k, v in values.items() if k in fields and k not in config.model_fields_set}
    source = best.provenance()
    if kept:
        source += f"; run config kept {', '.join(kept)}"
    return config.model_copy(update=update), source
