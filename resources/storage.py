"""Storage resource: every path under one ``FOXHUNT_HOME`` plus the DuckDB file, with the
warehouse, the checkpoints and the landing zone optionally on object storage (URLs)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
from pydantic import PrivateAttr
from upath import UPath

from foxhunt_pipeline.config.paths import FoxhuntPaths
from foxhunt_pipeline.storage import artifact_sync, model_store, object_store, warehouse
from foxhunt_pipeline.storage import scratch as scratch_area

#: the evaluations' append-only table (DuckDB locally) and, per protocol, every candidate's
#: pooled test bars (``evaluation_bars/<protocol_id>/``): written by ``assets.evaluation``,
#: read by the leaderboard and live monitoring
EVALUATIONS_TABLE = "model_evaluations"
BARS_TABLE = "evaluation_bars"


class FoxhuntStorage(dg.ConfigurableResource):
    """Resolves ``home`` (empty = ``$FOXHUNT_HOME`` or ``./.foxhunt``) at use time, so one
    definition serves the UI, the CLI and tests pointed at a temp dir. Each ``*_url`` (empty =
    its ``FOXHUNT_*_URL`` variable, else the local directory under home) may be any fsspec
    URL, e.g. ``s3://bucket/foxhunt/warehouse``; home then only holds scratch and caches."""

    home: str = ""
    warehouse_url: str = ""
    artifacts_url: str = ""
    landing_url: str = ""
    _area: Path | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Every run starts by sweeping what killed runs left behind (see ``scratch``)."""
        self.sweep()

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        """The run's scratch area goes, whether the run failed or not."""
        if self._area is not None:
            scratch_area.remove(self._area)
            self._area = None

    def sweep(self, force: bool = False) -> list[Path]:
        """Remove dead processes' scratch areas and temp files (local roots only)."""
        def local(root: UPath) -> Path | None:
            return Path(root.path) if object_store.is_local(root) else None

        trees = [p for p in (local(self.warehouse_root), local(self.checkpoints_root)) if p]
        return scratch_area.sweep(self.paths.home, trees, local(self.landing_root), force=force)

    @property
    def run_scratch(self) -> Path:
        """This run's own scratch area (staging files, spill files, copies of landed
        objects): removed when the run ends, swept at the next start if it was killed."""
        if self._area is None or not self._area.is_dir():
            self._area = scratch_area.new_area(self.scratch)
        return self._area

    @property
    def forecast_cache(self) -> Path:
        """Forecasters' quantiles over a split, by content hash, shared between the runs of
        the agents' training and evaluation (``models.agents.forecast_memo``)."""
        return self.scratch / "cache" / "forecasts"

    @property
    def fold_model_cache(self) -> Path:
        """Walk-forward fold models, shared between the evaluations that retrain the same
        forecaster on the same fold (``models.evaluation.family_candidates``)."""
        return self.scratch / "cache" / "fold_models"

    @property
    def paths(self) -> FoxhuntPaths:
        return FoxhuntPaths.from_env(self.home or None).ensure()

    @property
    def warehouse_root(self) -> UPath:
        return object_store.warehouse_root(self.warehouse_url or None, self.paths.home)

    @property
    def checkpoints_root(self) -> UPath:
        return object_store.artifacts_root(self.artifacts_url or None, self.paths.home)

    @property
    def landing_root(self) -> UPath:
        return object_store.landing_root(self.landing_url or None, self.paths.home)

    @property
    def scratch(self) -> Path:
        """Local working space: staging files, runs before upload, downloaded copies."""
        d = self.paths.home / "scratch"
        d.mkdir(parents=True, exist_ok=True)
        return d

    @property
    def duckdb_path(self) -> Path:
        return self.paths.duckdb

    def current_model(self, family: str) -> tuple[dict, Path, Path]:
        """(pointer, local checkpoint path, local run directory) of the family's current model,
        downloaded to the local cache first when the checkpoints live in object storage."""
        pointer = model_store.current(self.checkpoints_root, family)
        cache = self.scratch / "cache" / "checkpoints"
        return (pointer, model_store.local_checkpoint(pointer, cache),
                model_store.local_run_dir(pointer, cache))

    def store_run_outputs(self, pointer: dict, run_dir: Path, outputs: Path) -> str:
        """Make ``outputs`` (a directory inside the local ``run_dir``, e.g. evaluation plots)
        durable beside the run; returns its location."""
        where = pointer.get("run_dir")
        if where is None or artifact_sync.local_path(where) is not None:
            return str(outputs)
        dest = artifact_sync.as_upath(model_store.located(where, run_dir, outputs))
        return str(artifact_sync.put_tree(outputs, dest))

    def append_rows(self, table: str, rows, part_name: str) -> None:
        """Append to an append-only table (``model_evaluations``): the DuckDB table locally;
        on a store one parquet object per call, then the catalogue's view over them."""
        root = self.warehouse_root
        if object_store.is_local(root):
            warehouse.append_duckdb_table(self.duckdb_path, table, rows)
            return
        object_store.write_table_part(root, table, part_name, rows)
        object_store.refresh_duckdb_views(self.duckdb_path, root)

    def write_part(self, table: str, part_name: str, rows: pl.DataFrame) -> None:
        """One more parquet part of a part-per-writer table (``evaluation_bars/<protocol>``),
        local or on a store alike."""
        object_store.write_table_part(self.warehouse_root, table, part_name, rows)

    def read_parts(self, table: str, columns: list[str] | None = None) -> pl.DataFrame:
        """Every part of a part-per-writer table (empty when none was written); only
        ``columns`` when given."""
        return object_store.read_table_parts(self.warehouse_root, table, columns)

    def evaluations_location(self, table: str) -> str:
        root = self.warehouse_root
        return f"{self.duckdb_path}:{table}" if object_store.is_local(root) else str(root / table)

    def read_rows(self, table: str):
        """All rows of an append-only table as a polars frame (empty when none were written)."""
        root = self.warehouse_root
        if not object_store.is_local(root):
            return object_store.read_table_parts(root, table)
        if not self.duckdb_path.exists():
            return pl.DataFrame()
        with duckdb.connect(str(self.duckdb_path), read_only=True) as con:
            known = {r[0] for r in con.sql("select table_name from duckdb_tables()").fetchall()}
            if table not in known:
                return pl.DataFrame()
            return pl.from_arrow(con.sql(f"select * from {table}").to_arrow_table())

    def table_path(self, table: str) -> UPath:
        """``<warehouse>/<table>/data.parquet``, for the single-file tables."""
        return object_store.table_upath(self.warehouse_root, table)

    def table_dir(self, table: str) -> Path:
        d = self.paths.table_dir(table)
        d.mkdir(parents=True, exist_ok=True)
        return d
