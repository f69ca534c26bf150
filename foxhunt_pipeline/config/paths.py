"""Where every piece of state lives: one root, ``FOXHUNT_HOME``, so a laptop run
never writes outside it and a test can point the whole system at a temp dir."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_HOME = ".foxhunt"


@dataclass(frozen=True)
class FoxhuntPaths:
    home: Path

    @classmethod
    def from_env(cls, home: str | os.PathLike[str] | None = None) -> FoxhuntPaths:
        raw = home if home is not None else os.environ.get("FOXHUNT_HOME", DEFAULT_HOME)
        return cls(Path(raw).expanduser().resolve())

    @property
    def landing(self) -> Path:
        return self.home / "landing"

    @property
    def warehouse(self) -> Path:
        return self.home / "warehouse"

    @property
    def duckdb(self) -> Path:
        return self.home / "foxhunt.duckdb"

    @property
    def mlflow_dir(self) -> Path:
        return self.home / "mlflow"

    @property
    def mlflow_tracking_uri(self) -> str:
        return f"sqlite:///{self.mlflow_dir / 'mlflow.db'}"

    @property
    def mlflow_artifacts(self) -> Path:
        return self.mlflow_dir / "artifacts"

    @property
    def optuna_storage_url(self) -> str:
        """Where hyperparameter studies live: ``$FOXHUNT_OPTUNA_URL`` (the deployment's
        database, shared by every worker) else SQLite under home."""
        return os.environ.get("FOXHUNT_OPTUNA_URL") or f"sqlite:///{self.home / 'optuna' / 'studies.db'}"

    @property
    def checkpoints(self) -> Path:
        return self.home / "checkpoints"

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"

    def table_dir(self, table: str) -> Path:
        return self.warehouse / table

    def ensure(self) -> FoxhuntPaths:
        for p in (self.landing, self.warehouse, self.mlflow_artifacts, self.checkpoints, self.dagster_home):
            p.mkdir(parents=True, exist_ok=True)
        return self
