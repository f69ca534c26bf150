"""What the data-parallel launcher (``assets.common.distributed_training``) and the torchrun
ranks (``assets.ddp_worker``) agree on: where each rank records its error, the kind of rank
0's result message, and the model config both sides build for a forecaster."""

from __future__ import annotations

from typing import Any

from models.registry import dataset_model_config

ERRORS_DIR = "errors"
RESULT_MESSAGE_KIND = "ddp_result"


def model_config_for(family: str, data, model_params: dict[str, Any]) -> dict[str, Any]:
    """The registry config of a forecaster for ``data`` (the same dict the single-process
    training asset builds): the dataset's fields, then ``model_params``."""
    return {**dataset_model_config(family, data.meta), **model_params}
