"""Storage resource: every path under one ``FOXHUNT_HOME`` plus the DuckDB file."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from foxhunt_pipeline.settings import FoxhuntPaths


class FoxhuntStorage(dg.ConfigurableResource):
    """Resolves ``home`` (empty = ``$FOXHUNT_HOME`` or ``./.foxhunt``) at use time, so one
    definition serves the UI, the CLI and tests pointed at a temp dir."""

    home: str = ""

    @property
    def paths(self) -> FoxhuntPaths:
        return FoxhuntPaths.from_env(self.home or None).ensure()

    @property
    def landing(self) -> Path:
        return self.paths.landing

    @property
    def warehouse(self) -> Path:
        return self.paths.warehouse

    @property
    def duckdb_path(self) -> Path:
        return self.paths.duckdb

    @property
    def checkpoints(self) -> Path:
        return self.paths.checkpoints

    def table_dir(self, table: str) -> Path:
        d = self.paths.table_dir(table)
        d.mkdir(parents=True, exist_ok=True)
        return d
