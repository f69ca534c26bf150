"""The code location: ``dagster dev -w workspace.yaml`` loads ``defs`` from here."""

from __future__ import annotations

import os

import dagster as dg

from assets import (
    agents,
    ensemble,
    evaluation,
    features,
    forecasting,
    ingestion,
    leaderboard,
    lightgbm_model,
    quantization,
    training,
    tuning,
)
from foxhunt_pipeline import automation as sensors
from foxhunt_pipeline.config.profiles import check_profiles
from foxhunt_pipeline.config.settings import load_settings
from resources.databento_source import DatabentoSource
from resources.mlflow_tracking import MLflowResource
from resources.pipes import PIPES_RESOURCE_KEY, build_pipes_subprocess_client
from resources.storage import FoxhuntStorage
from resources.torch_device import TorchDevice

ASSET_MODULES = [ingestion, features, training, lightgbm_model, agents, ensemble, evaluation,
                 leaderboard, quantization, tuning, forecasting]


def build_resources() -> dict[str, object]:
    """The resources every asset gets; ``MLFLOW_TRACKING_URI`` (a tracking server) is read here,
    when the code location starts."""
    return {
        "storage": FoxhuntStorage(),
        "mlflow": MLflowResource(tracking_uri=os.environ.get("MLFLOW_TRACKING_URI", "")),
        "torch_device": TorchDevice(),
        "databento": DatabentoSource(),
        PIPES_RESOURCE_KEY: build_pipes_subprocess_client(),
    }


def all_assets() -> list:
    return list(dg.load_assets_from_modules(ASSET_MODULES))


def all_checks() -> list:
    return list(dg.load_asset_checks_from_modules(ASSET_MODULES))


def build_definitions() -> dg.Definitions:
    """The code location starts: check the size profiles against the fields the asset
    modules declared (a misspelt key stops it here, named), read the environment once
    (``load_settings``), then build the jobs, sensors and schedule from those settings, and
    the resources."""
    check_profiles()
    auto = sensors.build_automation(load_settings())
    return dg.Definitions(
        assets=all_assets(),
        asset_checks=all_checks(),
        jobs=[auto.ingest_job, auto.history_job, auto.retrain_job],
        sensors=[auto.landing_sensor, auto.history_sensor, auto.automation_sensor],
        schedules=[auto.retrain_schedule],
        resources=build_resources(),
    )


defs = build_definitions()
