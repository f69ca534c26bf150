"""Registered models the MLflow way: a ``mlflow.pyfunc.PythonModel`` around the project's
own artifact (an exported forecaster, or an agent's policy directory), so that
``mlflow.pyfunc.load_model("models:/foxhunt-tft@champion").predict(df)`` and
``mlflow models serve`` take consecutive rows of the ``features`` table exactly as the table
stores them and answer with what ``foxhunt predict`` answers (the same code:
``foxhunt_pipeline.serving.loaded.LoadedModel``). The wrapper carries no weights of its own:
the artifact directory travels inside the MLflow model as ``artifacts/model``."""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np
import pandas as pd
import polars as pl
from mlflow.models import infer_signature
from mlflow.types.schema import AnyType, ColSpec, Schema

from foxhunt_pipeline.basics.utc import UTC_OFFSET, iso_utc
from foxhunt_pipeline.serving.loaded import LoadedModel
from models import families

MODEL_ARTIFACT = "model"  # the run-relative folder each registered version points at


class FoxhuntModel(mlflow.pyfunc.PythonModel):
    """Quantile forecasts (``h1_q10`` .. columns, log-return units) or agent actions for a
    pandas frame of ``features`` rows of one or more roots (at least ``lookback`` per root)."""

    def load_context(self, context: Any) -> None:
        self.model = LoadedModel.load(context.artifacts["model"])

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        if not hasattr(self, "model"):
            self.load_context(context)
        frame = pl.from_pandas(pd.DataFrame(model_input))
        kwargs = {}
        if self.model.kind == "forecaster" and params and params.get("future_known"):
            kwargs["future_known"] = str(params["future_known"])
        return self.model.predict(frame, **kwargs).to_pandas()


def input_example(artifact: Path, features: pl.LazyFrame | pl.DataFrame | None) -> pd.DataFrame | None:
    """The newest ``lookback + horizon + 2`` consecutive finite rows of the model's first root
    in ``features``, with the columns the model reads, numbers as float64 (JSON and the
    signature then agree on types); ``None`` when the table cannot give them."""
    if features is None:
        return None

    model = LoadedModel.load(artifact)
    lf = features.lazy()
    names = lf.collect_schema().names()
    cols = model.input_columns
    if any(c not in names for c in cols):
        return None
    n = int(model.meta.get("lookback", 1)) + int(model.meta.get("horizon", 1)) + 2
    roots = model.meta.get("roots") or []
    if roots:
        lf = lf.filter(pl.col("root") == roots[0])
    rows = lf.select(cols).sort("root", "ts_event").tail(n).collect()
    numeric = cols[3:]
    if rows.height < n or rows.select(pl.col(numeric).is_nan().any()).row(0) != tuple([False] * len(numeric)) \
            or rows.null_count().sum_horizontal().item():
        return None
    return rows.with_columns(pl.col(numeric).cast(pl.Float64), pl.col("contract_seq").cast(pl.Int64)).to_pandas()


def log_pyfunc_model(run: Any, artifact: Path, *, input_frame: pd.DataFrame | None, artifact_path: str = MODEL_ARTIFACT,
                     metadata: Mapping[str, Any] | None = None) -> str:
    """Save the wrapper with ``artifact`` as an MLflow model (signature inferred from a real
    prediction on ``input_frame``), log it under ``artifact_path`` of the tracked run; returns
    the run-relative path to register."""
    signature = None
    if input_frame is not None:
        out = LoadedModel.load(artifact).predict(pl.from_pandas(input_frame)).to_pandas()
        with warnings.catch_warnings():  # the hint on integer columns: contract_seq is never null
            warnings.simplefilter("ignore", UserWarning)
            signature = infer_signature(input_frame, out, params={"future_known": "require"})
        # MLflow's datetime type takes zone-naive values only; the table's ts_event is UTC-aware
        signature.inputs = Schema([ColSpec(AnyType(), c.name) if c.name == "ts_event" else c
                                   for c in signature.inputs.inputs])
    with tempfile.TemporaryDirectory(prefix="pyfunc-") as tmp:
        target = Path(tmp) / "model"
        mlflow.pyfunc.save_model(
            str(target), python_model=str(Path(__file__).with_name("pyfunc_entry.py")), artifacts={"model": str(artifact)},
            signature=signature, input_example=input_frame, metadata=dict(metadata or {}),
            pip_requirements=["mlflow", "torch", "polars", "pandas", "numpy", "safetensors",
                              "lightgbm"],
        )
        run.log_artifacts(target, artifact_path)
    return artifact_path


def register_pyfunc(run: Any, registered: str, artifact: Path, *, family: str, precision: str,
                    features: pl.LazyFrame | pl.DataFrame | None, card: str, artifact_path: str = MODEL_ARTIFACT,
                    tags: Mapping[str, str] | None = None) -> str:
    """Log ``artifact`` as a pyfunc model of the run and register it as a new version of
    ``registered`` tagged with family and precision, its description the model card."""
    frame = input_example(artifact, features)
    log_pyfunc_model(run, artifact, input_frame=frame, artifact_path=artifact_path,
                     metadata={"family": family, "precision": precision})
    version = run.register(registered, artifact_path,
                           tags={"precision": precision, "family": family, **dict(tags or {})})
    run.client.update_model_version(registered, version, description=card)
    return version


def model_card(family: str, precision: str, training_meta: Mapping[str, Any], *,
               data_range: tuple[str, str] | None, metrics: Mapping[str, Any],
               protocol: str | None = None, notes: Sequence[str] = ()) -> str:
    """Markdown for the MLflow model-version page: what the model saw and how it scored;
    ``notes`` say what it is beyond that (an ensemble that equals one member, what an agent
    observes)."""
    m = training_meta
    cfg = m.get("dataset_config") or {}
    fractions = cfg.get("fractions")
    protocol = protocol or (
        "chronological train / validation / test split by whole trade dates"
        + (f" (fractions {', '.join(f'{f:g}' for f in fractions)})" if fractions else "")
        + "; observed features normalised with train-only statistics; headline metrics on validation")
    metric_lines = "\n".join(f"| {k} | {v:.6g} |" if isinstance(v, float) else f"| {k} | {v} |"
                              for k, v in metrics.items()) or "| - | - |"
    bar = m.get("bar_seconds")
    return "\n".join([
        f"### foxhunt {family} ({precision})",
        "",
        f"- **data range**: {data_range[0]} .. {data_range[1]}" if data_range else "- **data range**: -",
        f"- **roots**: {', '.join(m.get('roots') or []) or '-'}",
        f"- **bar size**: {bar} s" if bar else "- **bar size**: -",
        f"- **features**: {len(m.get('observed_names', []))} observed, {len(m.get('known_names', []))} known, "
        f"{len(m.get('static_names', []))} static (feature hash {str(m.get('feature_hash', '-'))[:12]})",
        f"- **lookback / horizon**: {m.get('lookback')} / {m.get('horizon')} bars",
        f"- **evaluation protocol**: {protocol}",
        "- **input**: consecutive `features` rows of one root as the table stores them (the model normalises "
        "with its own stats); **output**: " + ("the action (0 short, 1 flat, 2 long) and position per row"
                                               if families.family(family).kind == "agent" else
                                               "quantile forecasts `h<k>_q<p>` of the k-bar log return"),
        *(f"- **{note}**" if note.startswith("ensemble = ") else f"- {note}" for note in notes),
        "",
        "| metric | value |",
        "|---|---|",
        metric_lines,
    ])


def data_range_of(data: Any) -> tuple[str, str] | None:
    """First and last bar of all splits of a ``TrainingData``, ISO UTC."""
    ts = [np.asarray(s.ts_event) for s in data.splits.values() if s.n_rows]
    if not ts:
        return None
    lo, hi = min(int(t.min()) for t in ts), max(int(t.max()) for t in ts)
    return iso_utc(lo, zone=UTC_OFFSET), iso_utc(hi, zone=UTC_OFFSET)


__all__ = ["MODEL_ARTIFACT", "FoxhuntModel", "data_range_of", "input_example", "log_pyfunc_model",
           "model_card", "register_pyfunc"]
