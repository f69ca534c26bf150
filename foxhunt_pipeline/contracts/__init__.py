"""The contract of every table: names and Arrow layout (``tables``), pandera schemas
(``schemas``) with their custom checks (``checks``), the fast screen (``screen``) and the
validation report (``validation``)."""

from foxhunt_pipeline.contracts.schemas import (
    continuous_bars_schema,
    raw_bars_schema,
    validate_frame,
    validate_parquet,
)
from foxhunt_pipeline.contracts.tables import (
    RAW_BARS,
    RAW_BARS_ARROW_SCHEMA,
    RAW_BARS_POLARS_SCHEMA,
    VIEW_TABLES,
)

__all__ = ["RAW_BARS", "RAW_BARS_ARROW_SCHEMA", "RAW_BARS_POLARS_SCHEMA", "VIEW_TABLES",
           "continuous_bars_schema", "raw_bars_schema", "validate_frame", "validate_parquet"]
