"""Feature library, model inputs and the training dataset builder (Dagster-free)."""

from foxhunt_pipeline.features.build import FeatureInputError, build_features, output_columns
from foxhunt_pipeline.features.calendar_inputs import KNOWN_NAMES
from foxhunt_pipeline.features.library import (
    DEFAULT_GROUPS,
    DEFAULT_WINDOWS,
    FeatureConfig,
    feature_names,
)
from foxhunt_pipeline.features.static_inputs import STATIC_NAMES
from foxhunt_pipeline.features.targets import target_names

__all__ = [
    "DEFAULT_GROUPS",
    "DEFAULT_WINDOWS",
    "KNOWN_NAMES",
    "STATIC_NAMES",
    "FeatureConfig",
    "FeatureInputError",
    "build_features",
    "feature_names",
    "output_columns",
    "target_names",
]
