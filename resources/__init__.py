"""Dagster resources: storage, DuckDB, MLflow, torch device, Databento source."""
