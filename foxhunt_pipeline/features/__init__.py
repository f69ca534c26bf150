"""Feature library, model inputs and the training dataset builder (Dagster-free).

The dataset builder lives in ``foxhunt_pipeline.features.dataset`` (it imports torch via
``models.windows``, so it is not imported here)."""

from foxhunt_pipeline.features.build import FeatureInputError, build_features, output_columns
from foxhunt_pipeline.features.calendar_inputs import KNOWN_NAMES
from foxhunt_pipeline.features.library import (
    DEFAULT_GROUPS,
    DEFAULT_WINDOWS,
    FeatureConfig,
    feature_names,
)
from foxhunt_pipeline.features.schema import FeatureValidation, feature_schema, validate_features
from foxhunt_pipeline.features.static_inputs import STATIC_NAMES
from foxhunt_pipeline.features.targets import target_names

__all__ = [
    "DEFAULT_GROUPS",
    "DEFAULT_WINDOWS",
    "KNOWN_NAMES",
    "STATIC_NAMES",
    "FeatureConfig",
    "FeatureInputError",
    "FeatureValidation",
    "build_features",
    "feature_names",
    "feature_schema",
    "output_columns",
    "target_names",
    "validate_features",
]
