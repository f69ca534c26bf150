"""The current forecasters an agent observes, checked against the dataset it trains on."""

import math

import dagster as dg

from models import families
from models.training.checkpoint import CheckpointMismatchError, check_compatible, load_checkpoint
from resources.storage import FoxhuntStorage


def current_forecasters(storage: FoxhuntStorage, data, device, log) -> tuple[dict, dict, dict]:
    """(models, their training configs, where they come from) of the current forecasters
    trained on this dataset's features; a missing one is left out with a warning."""
    models, train_configs, sources = {}, {}, {}
    for family in families.family("dqn").members:  # the agents observe the same forecasters
        try:
            pointer, checkpoint, _ = storage.current_model(family)
        except FileNotFoundError:
            log.warning(f"no current {family} model: the agent observes the others only")
            continue
        model, meta = load_checkpoint(checkpoint, device=device)
        try:
            check_compatible(meta, data)
        except CheckpointMismatchError as e:
            raise dg.Failure(f"the current {family} model was trained on other features than "
                             f"the dataset: materialize {family}_model first ({e})") from e
        if not math.isclose(float(meta.get("target_scale", data.target_scale)),
                            data.target_scale, rel_tol=1e-9):
            # its quantiles are in another dataset version's units: the state would mix them
            raise dg.Failure(f"the current {family} model was trained on another version of "
                             f"the dataset: materialize {family}_model first")
        models[family] = model
        train_configs[family] = meta.get("train_config", {})
        sources[family] = {"registered_model": pointer["registered_model"],
                           "version": pointer["version"], "mlflow_run_id": pointer["mlflow_run_id"]}
    if not models:
        raise dg.Failure("the agents decide on the forecasters' forecasts: materialize "
                         "tft_model and mamba2_model first")
    return models, train_configs, sources
