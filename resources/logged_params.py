"""The configuration a training asset logged to its MLflow run, read back as nested values."""

from __future__ import annotations

import json

from resources.mlflow_tracking import MLflowResource


def _param_value(text: str):
    """A logged parameter's text as the value it was (JSON, or Python's True/False/None)."""
    try:
        return json.loads(text)
    except ValueError:
        return {"True": True, "False": False, "None": None}.get(text, text)


def training_params(mlflow: MLflowResource, run_id: str, prefix: str) -> dict:
    """The ``prefix.*`` parameters the training asset logged (its effective config), nested."""
    params = mlflow.client().get_run(run_id).data.params
    out: dict = {}
    for key, text in params.items():
        if not key.startswith(prefix + "."):
            continue
        *path, leaf = key.removeprefix(prefix + ".").split(".")
        node = out
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = _param_value(text)
    return out
