"""The overall champion in the MLflow registry: which version it is (the registered model
tagged ``foxhunt.overall_champion`` whose alias ``champion`` names a version), loaded as the
same ``LoadedModel`` the pyfunc wrapper serves, downloaded once per version to a local
cache; and the tags that record what live monitoring found (a decay alarm, a demotion)."""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from foxhunt_pipeline.forecasting.frame import ForecastModel
from foxhunt_pipeline.forecasting.reference import live_start
from foxhunt_pipeline.serving.loaded import LoadedModel
from foxhunt_pipeline.storage import dataset_store
from foxhunt_pipeline.storage import trade_dates as stored
from models import families
from resources.mlflow_tracking import MLflowResource
from resources.storage import BARS_TABLE, EVALUATIONS_TABLE, FoxhuntStorage

CHAMPION_ALIAS = "champion"
OVERALL_TAG = "foxhunt.overall_champion"
#: on a model version: the decay check's failure that asks for retraining (JSON)
DECAY_TAG = "foxhunt.decay_alarm"
#: on a model version: why it lost the alias after a decay alarm (never champion again)
DEMOTED_TAG = "foxhunt.demoted"


@dataclass(frozen=True)
class ChampionRef:
    family: str
    model: str  # registered name
    version: str
    run_id: str
    tags: dict[str, str]

    @property
    def key(self) -> str:
        return f"{self.model} v{self.version}"

    @property
    def decay_alarm(self) -> dict[str, Any] | None:
        text = self.tags.get(DECAY_TAG)
        return json.loads(text) if text else None


def _missing(e: Exception) -> bool:
    code = getattr(e, "error_code", "")
    return code == "RESOURCE_DOES_NOT_EXIST" or "not found" in str(e).lower()


def overall_champion(client: Any) -> ChampionRef | None:
    """The overall champion's version, or None (no champion yet, or it was demoted)."""
    from mlflow.exceptions import MlflowException

    for fam in families.REGISTRY.values():
        try:
            if client.get_registered_model(fam.registered_name).tags.get(OVERALL_TAG) != "true":
                continue
            mv = client.get_model_version_by_alias(fam.registered_name, CHAMPION_ALIAS)
        except MlflowException as e:
            if _missing(e):
                continue
            raise
        return ChampionRef(fam.name, fam.registered_name, str(mv.version), mv.run_id,
                           dict(mv.tags or {}))
    return None


def load_champion(client: Any, tracking_uri: str, ref: ChampionRef, cache: Path) -> LoadedModel:
    """The champion's registered pyfunc model as a ``LoadedModel``, downloaded into
    ``cache/<model>-v<version>`` the first time (a version's artifacts never change)."""
    import mlflow

    target = Path(cache) / f"{ref.model}-v{ref.version}"
    if not (target / "MLmodel").is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        source = client.get_model_version_download_uri(ref.model, ref.version)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            local = Path(mlflow.artifacts.download_artifacts(artifact_uri=source, dst_path=tmp,
                                                             tracking_uri=tracking_uri))
            shutil.rmtree(target, ignore_errors=True)
            local.rename(target)
    return mlflow.pyfunc.load_model(str(target)).unwrap_python_model().model


@dataclass(frozen=True)
class Champion:
    """The overall champion as the forecasts and the live checks need it."""

    ref: ChampionRef
    fm: ForecastModel
    cost_by_root: dict[str, float]
    test_bars: pl.DataFrame  # its walk-forward test bars: root, ts_event, pnl
    bars_per_year: float
    live_start: date | None


def _test_bars(storage: FoxhuntStorage, ref: ChampionRef) -> pl.DataFrame:
    """The champion version's pooled walk-forward test bars (its newest protocol's)."""
    rows = storage.read_rows(EVALUATIONS_TABLE)
    if rows.is_empty() or "protocol_id" not in rows.columns:
        return pl.DataFrame()
    mine = rows.filter((pl.col("model") == ref.model) & (pl.col("version") == ref.version)
                       & (pl.col("fold") == "pooled")).sort("evaluated_at")
    for protocol in reversed(mine["protocol_id"].to_list()):
        bars = storage.read_parts(f"{BARS_TABLE}/{protocol}")
        if bars.is_empty():
            continue
        bars = bars.filter((pl.col("model") == ref.model) & (pl.col("version") == ref.version))
        if bars.height:
            return bars.unique(["root", "ts_event"], keep="last").sort("root", "ts_event")
    return pl.DataFrame()


def current_champion(storage: FoxhuntStorage, mlflow: MLflowResource,
                     threshold_k: float = 1.0) -> Champion | None:
    """The overall champion loaded for forecasting, or None when there is none."""
    client = mlflow.client()
    ref = overall_champion(client)
    if ref is None:
        return None
    loaded = load_champion(client, mlflow.resolved_uri(), ref, storage.scratch / "cache" / "champion")
    fm = ForecastModel(loaded, ref.model, ref.version, ref.family, threshold_k=threshold_k)
    meta = dataset_store.current_meta(storage.warehouse_root) or {}
    costs = dict(zip(meta.get("roots") or loaded.meta.get("roots") or [],
                     meta.get("cost_log_return") or loaded.meta.get("cost_log_return") or [],
                     strict=False))
    bars = _test_bars(storage, ref)
    per_year = float(bars["bars_per_year"][0]) if bars.height else float(
        meta.get("bars_per_year") or np.nan)
    start = (live_start(bars["ts_event"], stored.stored_dates(storage.warehouse_root, "features"))
             if bars.height else None)
    return Champion(ref, fm, {k: float(v) for k, v in costs.items()}, bars, per_year, start)


__all__ = ["CHAMPION_ALIAS", "DECAY_TAG", "DEMOTED_TAG", "OVERALL_TAG", "Champion", "ChampionRef",
           "current_champion", "load_champion", "overall_champion"]
