"""One loaded model of any family: an exported forecaster artifact (quantiles) or an agent
(actions), with one ``predict(frame)``; what ``foxhunt predict`` and the MLflow pyfunc
wrapper both call, so a registered model and its artifact path give the same numbers."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import polars as pl

from foxhunt_pipeline.serving.actions import actions_frame, is_agent, load_agent
from foxhunt_pipeline.serving.predict import check_forecaster, predict_frame
from models.export import load_artifact


@dataclass
class LoadedModel:
    kind: Literal["forecaster", "agent"]
    fn: Any
    meta: dict[str, Any]
    path: Path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> LoadedModel:
        path = Path(path)
        if is_agent(path):
            fn, meta = load_agent(path)
            return cls("agent", fn, meta, path)
        fn, meta = load_artifact(path)
        check_forecaster(meta, path)
        return cls("forecaster", fn, meta, path)

    @property
    def input_columns(self) -> list[str]:
        """The features-table columns the model reads (keys first)."""
        m = self.meta
        cols = ["ts_event", "root", "contract_seq", *m["observed_names"], *m["known_names"]]
        if self.kind == "forecaster" or m.get("observation") == "forecasts":
            cols += list(m["static_names"])
        return cols

    def predict(self, df: pl.DataFrame, **kwargs: Any) -> pl.DataFrame:
        """Quantile columns (forecasters) or ``action`` / ``position`` (agents) per row it can."""
        if self.kind == "agent":
            return actions_frame(self.fn, self.meta, df, source=str(self.path))
        return predict_frame(self.fn, self.meta, df, source=str(self.path), **kwargs)


__all__ = ["LoadedModel"]
