"""Forecasts from a deployed artifact on a slice of the features table (no training code).

Windows are built exactly as ``models.windows`` builds training windows: ``lookback``
history rows and ``lookback + horizon`` known-input rows, all in one (root, contract_seq)
segment, static inputs from the last history row; observed features normalised with the
train-only mean / std (and clip) carried in the artifact's sidecar.

The last ``horizon`` rows of a segment have no following rows for the future known
inputs. ``future_known="require"`` (default) predicts only where those rows exist, the
same rule as training; ``"hold_last"`` also predicts there, repeating the segment's last
known row (an approximation, flagged in the ``known_filled`` column), for live use on the
newest bars. Windows with any non-finite input (e.g. feature warm-up nulls) are skipped.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl
import torch

from foxhunt_pipeline.features.dataset import DatasetConfig, feature_hash
from models.export import FORECASTER_INPUTS, load_artifact

KEY_COLUMNS = ("ts_event", "root", "contract_seq")


class PredictInputError(ValueError):
    """The features slice or the artifact cannot make forecasts; names the file and field."""


class FeatureHashMismatch(PredictInputError):
    """The features were built with a different feature set than the model was trained on."""


def predict_from_parquet(
    artifact_path: str | os.PathLike[str],
    features_parquet: str | os.PathLike[str],
    *,
    root: str | Sequence[str] | None = None,
    start: datetime | str | None = None,
    end: datetime | str | None = None,
    future_known: Literal["require", "hold_last"] = "require",
    check_feature_hash: bool = True,
    batch_size: int = 1024,
) -> pl.DataFrame:
    """ts_event (the forecast origin: last history bar), root, contract_seq and one column
    per horizon and quantile (``h1_q10`` .. ``h5_q90``) in log-return units, for every row
    with a full history window whose ts_event lies in [start, end]."""
    fn, meta = load_artifact(artifact_path)
    check_forecaster(meta, Path(artifact_path))
    path = Path(features_parquet)
    files = features_files(path)
    schema = pl.read_parquet_schema(files[0])
    _check_columns(schema, meta, path)
    if check_feature_hash:
        check_features_match(list(schema), meta, path)

    lf = pl.scan_parquet(files, hive_partitioning=False)
    if root is not None:
        roots = [root] if isinstance(root, str) else list(root)
        lf = lf.filter(pl.col("root").is_in(roots))
    df = lf.select(*KEY_COLUMNS, *_input_columns(meta)).sort("root", "ts_event").collect()
    return predict_frame(fn, meta, df, start=start, end=end, future_known=future_known, batch_size=batch_size)


def features_files(path: Path) -> list[Path]:
    """The parquet files of a features file or directory (the table stored by trade date,
    ``trade_date=*/*.parquet``), in date order."""
    if not path.exists():
        raise PredictInputError(f"{path}: features parquet not found")
    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    if not files:
        raise PredictInputError(f"{path}: no features parquet under this directory")
    return files


def predict_frame(
    fn: Any,
    meta: dict[str, Any],
    df: pl.DataFrame,
    *,
    start: datetime | str | None = None,
    end: datetime | str | None = None,
    future_known: Literal["require", "hold_last"] = "require",
    batch_size: int = 1024,
    source: str = "input frame",
) -> pl.DataFrame:
    """Forecasts of a loaded forecaster artifact ``(fn, meta)`` for a frame of features rows
    (any row order; one or more roots); what ``predict_from_parquet`` and the MLflow pyfunc
    wrapper share, so both give the same numbers."""
    _check_columns(df.schema, meta, source)
    df = conform_keys(df).select(*KEY_COLUMNS, *_input_columns(meta)).sort("root", "ts_event")
    windows = build_windows(df, meta, start=start, end=end, future_known=future_known)
    pred = _run(fn, meta, windows["inputs"], batch_size)
    pred = pred.astype(np.float64) * float(meta["target_scale"])
    return _frame(df, windows, pred, meta)


def conform_keys(df: pl.DataFrame) -> pl.DataFrame:
    """Key columns as the features table types them: a naive ``ts_event`` (JSON, pandas
    without a zone) is read as UTC, ``contract_seq`` of any integer width as Int32."""
    ts = df.schema["ts_event"]
    ts_expr = pl.col("ts_event")
    if isinstance(ts, pl.Datetime):
        ts_expr = ts_expr.dt.replace_time_zone("UTC") if ts.time_zone is None else ts_expr.dt.convert_time_zone("UTC")
        ts_expr = ts_expr.dt.cast_time_unit("ns")
    else:
        ts_expr = ts_expr.str.to_datetime(time_zone="UTC", time_unit="ns") if ts == pl.String else ts_expr
    return df.with_columns(ts_expr.alias("ts_event"), pl.col("contract_seq").cast(pl.Int32),
                           pl.col("root").cast(pl.String))


def check_features_match(columns: Sequence[str], meta: dict[str, Any], source: Path | str = "features") -> None:
    """Refuse features whose f_/k_/s_ columns (names and order) give another feature hash."""
    expected = meta.get("feature_hash")
    config = meta.get("dataset_config")
    names = {p: [c for c in columns if c.startswith(p)] for p in ("f_", "k_", "s_")}
    want = {"f_": meta["observed_names"], "k_": meta["known_names"], "s_": meta["static_names"]}
    if expected is None or config is None:
        # no way to recompute the hash: fall back to the exact name lists
        for p, cols in names.items():
            if cols != list(want[p]):
                raise FeatureHashMismatch(_diff_message(source, p, cols, want[p]))
        return
    cfg = DatasetConfig(**{**config, "fractions": tuple(config["fractions"])})
    targets = list(meta.get("target_names") or [f"y_{h}" for h in range(1, int(meta["horizon"]) + 1)])
    got = feature_hash(names["f_"], names["k_"], names["s_"], targets, cfg)
    if got != expected:
        diffs = [_diff_message(source, p, names[p], want[p]) for p in names if names[p] != list(want[p])]
        raise FeatureHashMismatch(
            f"{source}: feature hash {got[:12]} != the model's {str(expected)[:12]}; "
            + ("; ".join(diffs) if diffs else "same column names, different dataset config")
        )


def build_windows(
    df: pl.DataFrame,
    meta: dict[str, Any],
    *,
    start: datetime | str | None = None,
    end: datetime | str | None = None,
    future_known: Literal["require", "hold_last"] = "require",
) -> dict[str, Any]:
    """Model inputs for every eligible forecast origin of ``df`` (sorted by root, ts_event)."""
    if future_known not in ("require", "hold_last"):
        raise ValueError(f"future_known must be 'require' or 'hold_last', got {future_known!r}")
    t, h = int(meta["lookback"]), int(meta["horizon"])
    observed = normalise_observed(df, meta)
    known = df.select(pl.col(meta["known_names"]).cast(pl.Float32)).to_numpy().reshape(df.height, -1)
    static = df.select(pl.col(meta["static_names"]).cast(pl.Float32)).to_numpy().reshape(df.height, -1)
    seg_start, seg_end = _segment_bounds(df)
    idx = np.arange(df.height)
    ok = idx - seg_start >= t - 1
    if future_known == "require":
        ok &= seg_end - idx >= h
    ok &= _in_range(df.get_column("ts_event"), start, end)
    origins = idx[ok]
    hist = origins[:, None] + np.arange(-t + 1, 1)[None, :]
    fut = np.minimum(origins[:, None] + np.arange(-t + 1, h + 1)[None, :], seg_end[origins][:, None])
    inputs = {"static": static[origins], "observed": observed[hist], "known": known[fut]}
    finite = np.ones(origins.size, dtype=bool)
    for x in inputs.values():
        finite &= np.isfinite(x.reshape(origins.size, -1)).all(axis=1)
    return {
        "origins": origins[finite],
        "known_filled": (seg_end[origins] - origins < h)[finite],
        "inputs": {k: np.ascontiguousarray(v[finite]) for k, v in inputs.items()},
        "skipped_non_finite": int((~finite).sum()),
    }


def normalise_observed(df: pl.DataFrame, meta: dict[str, Any]) -> np.ndarray:
    """Observed features as the training dataset stored them: (x - mean) / std, clipped."""
    names = meta["observed_names"]
    norm = meta.get("normalization") or meta.get("normalisation")
    if norm is None:
        raise PredictInputError("artifact metadata has no 'normalization' (train mean / std of observed)")
    mean, std = norm["mean"], norm["std"]
    if len(mean) != len(names) or len(std) != len(names):
        raise PredictInputError(
            f"artifact normalization has {len(mean)} means / {len(std)} stds for {len(names)} observed names"
        )
    clip = norm.get("clip_sigma")
    exprs = []
    for c, m, s in zip(names, mean, std, strict=True):
        e = (pl.col(c).cast(pl.Float64) - m) / s
        if clip is not None:
            e = e.clip(-clip, clip)
        exprs.append(e.cast(pl.Float32).alias(c))
    out = df.select(exprs).to_numpy()
    return out.reshape(df.height, len(names)).astype(np.float32, copy=False)


def quantile_column(horizon: int, q: float) -> str:
    return f"h{horizon}_q{q * 100:g}"


# --- helpers -------------------------------------------------------------------------


def check_forecaster(meta: dict[str, Any], path: Path) -> None:
    need = ("lookback", "horizon", "quantiles", "target_scale", "observed_names", "known_names", "static_names")
    missing = [k for k in need if k not in meta]
    if missing:
        raise PredictInputError(f"{path}: artifact metadata lacks {missing}; is it a forecaster artifact?")
    if list(meta.get("input_names", [])) != list(FORECASTER_INPUTS):
        raise PredictInputError(
            f"{path}: artifact inputs are {meta.get('input_names')}, a forecaster takes {list(FORECASTER_INPUTS)}"
        )


def _input_columns(meta: dict[str, Any]) -> list[str]:
    return [*meta["observed_names"], *meta["known_names"], *meta["static_names"]]


def _check_columns(schema: Any, meta: dict[str, Any], path: Path | str) -> None:
    missing = [c for c in (*KEY_COLUMNS, *_input_columns(meta)) if c not in schema]
    if missing:
        shown = ", ".join(missing[:20]) + (f" ... ({len(missing)} in all)" if len(missing) > 20 else "")
        raise PredictInputError(f"{path}: missing columns the model needs: {shown}")


def _diff_message(source: Path | str, prefix: str, got: list[str], want: Sequence[str]) -> str:
    extra = [c for c in got if c not in want]
    lacking = [c for c in want if c not in got]
    if not extra and not lacking:
        return f"{source}: {prefix}* columns are in a different order than the model's"
    return f"{source}: {prefix}* columns differ: extra {extra[:10]}, missing {lacking[:10]}"


def _segment_bounds(df: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """First / last row index of each row's (root, contract_seq) run."""
    key = df.select(
        (pl.col("root").ne(pl.col("root").shift()) | pl.col("contract_seq").ne(pl.col("contract_seq").shift()))
        .fill_null(True)
        .cum_sum()
        .alias("seg")
    ).get_column("seg").to_numpy()
    n = key.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    change = np.flatnonzero(np.diff(key)) + 1
    firsts = np.concatenate([[0], change])
    lasts = np.concatenate([change - 1, [n - 1]])
    run = np.repeat(np.arange(firsts.size), np.diff(np.concatenate([firsts, [n]])))
    return firsts[run], lasts[run]


def _in_range(ts: pl.Series, start: datetime | str | None, end: datetime | str | None) -> np.ndarray:
    mask = pl.Series(np.ones(ts.len(), dtype=bool))
    for bound, keep in ((start, lambda s, b: s >= b), (end, lambda s, b: s <= b)):
        if bound is not None:
            mask &= keep(ts, _as_utc(bound))
    return mask.to_numpy()


def _as_utc(value: datetime | str) -> datetime:
    out = datetime.fromisoformat(value) if isinstance(value, str) else value
    if out.tzinfo is None:
        out = out.replace(tzinfo=UTC)
    return out


def _run(fn: Any, meta: dict[str, Any], inputs: dict[str, np.ndarray], batch_size: int) -> np.ndarray:
    n = inputs["static"].shape[0]
    h, q = int(meta["horizon"]), len(meta["quantiles"])
    out = np.empty((n, h, q), dtype=np.float32)
    with torch.inference_mode():
        for i in range(0, n, batch_size):
            batch = [torch.from_numpy(inputs[name][i : i + batch_size]) for name in FORECASTER_INPUTS]
            pred = fn(*batch)
            if tuple(pred.shape[1:]) != (h, q):
                raise PredictInputError(f"artifact returned shape {tuple(pred.shape)}, expected [B, {h}, {q}]")
            out[i : i + batch_size] = pred.float().numpy()
    return out


def _frame(df: pl.DataFrame, windows: dict[str, Any], pred: np.ndarray, meta: dict[str, Any]) -> pl.DataFrame:
    origins = windows["origins"]
    keys = df.select(KEY_COLUMNS)[origins] if origins.size else df.select(KEY_COLUMNS).clear()
    cols = {
        quantile_column(hz + 1, q): pred[:, hz, j]
        for hz in range(pred.shape[1])
        for j, q in enumerate(meta["quantiles"])
    }
    return keys.with_columns(
        pl.Series("known_filled", windows["known_filled"], dtype=pl.Boolean),
        *(pl.Series(name, values, dtype=pl.Float64) for name, values in cols.items()),
    )


__all__ = [
    "FeatureHashMismatch",
    "PredictInputError",
    "build_windows",
    "check_features_match",
    "conform_keys",
    "normalise_observed",
    "predict_frame",
    "predict_from_parquet",
    "quantile_column",
]
