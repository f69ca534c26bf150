"""What live data is compared with: when the champion went live, and a sample of what it was
trained and judged on (features and its own forecasts) for the drift checks.

The champion goes live on the first stored trade date after the last bar of its
walk-forward test folds: the data it was trained and judged on ends there, so every date
from then on is new to it (a date forecast before, e.g. a backfill of the history, is
in-sample and not live). The reference of the drift checks is the ``reference_days``
stored dates before the live start: features (a row sample) and the champion's forecasts
of them, computed once per champion version and kept beside the warehouse's other state.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime

import numpy as np
import polars as pl
from upath import UPath

from foxhunt_pipeline.features.grid import trade_date_expr
from foxhunt_pipeline.forecasting.frame import ForecastModel, forecast_rows
from foxhunt_pipeline.forecasting.freshness import FEATURES
from foxhunt_pipeline.forecasting.inputs import read_date_inputs
from foxhunt_pipeline.storage import object_store, trade_dates
from models.monitoring import decay, drift

MONITORING = "monitoring"


def live_start(test_ts: pl.Series, stored: Sequence[date]) -> date | None:
    """The first of ``stored`` dates after the trade date of the last test bar (UTC ns)."""
    if test_ts.is_empty():
        return None
    last = pl.DataFrame({"ts_event": [test_ts.max()]}).select(trade_date_expr()).item()
    later = [d for d in stored if d > last]
    return later[0] if later else None


def reference_dates(root: UPath, start: date, n: int) -> list[date]:
    """The ``n`` stored features dates before ``start``."""
    return [d for d in trade_dates.stored_dates(root, FEATURES) if d < start][-n:]


def reference_dir(root: UPath, model: str, version: str) -> UPath:
    return root / MONITORING / "reference" / f"{model}-v{version}"


def _sample(frame: pl.DataFrame, rows: int, seed: int) -> pl.DataFrame:
    return frame if frame.height <= rows else frame.sample(rows, seed=seed)


def drift_reference(root: UPath, fm: ForecastModel, cost_by_root: Mapping[str, float],
                    start: date, days: int = 20, rows: int = 20_000, seed: int = 0
                    ) -> tuple[pl.DataFrame, pl.DataFrame, list[date]]:
    """(features sample, the champion's forecasts, dates) of the ``days`` stored dates before
    ``start``: read from the version's cache, else computed and cached."""
    where = reference_dir(root, fm.model, fm.version)
    feats, preds = where / "features.parquet", where / "predictions.parquet"
    if feats.is_file() and preds.is_file():
        f, p = object_store.read_parquet(feats), object_store.read_parquet(preds)
        return f, p, sorted(set(f["trade_date"].to_list())) if "trade_date" in f.columns else []
    dates = reference_dates(root, start, days)
    if not dates:
        return pl.DataFrame(), pl.DataFrame(), []
    observed = list(fm.loaded.meta.get("observed_names", []))
    frame = trade_dates.read_dates(root, FEATURES, dates[0], dates[-1],
                                   columns=["ts_event", "root", *observed])
    frame = _sample(frame.with_columns(trade_date=trade_date_expr()), rows, seed)
    made = datetime.now(UTC)
    lookback = int(fm.loaded.meta.get("lookback", 1))
    parts = [forecast_rows(fm, read_date_inputs(root, d, lookback, fm.columns), cost_by_root, made)
             for d in dates]
    predictions = pl.concat([p.select("trade_date", "root", "forecast", "position")
                             for p in parts if p.height])
    object_store.write_parquet(frame, feats)
    object_store.write_parquet(predictions, preds)
    return frame, predictions, dates


def test_pnl(bars: pl.DataFrame) -> dict[str, np.ndarray]:
    """Each root's walk-forward test P&L in time order (``root``, ``ts_event``, ``pnl``)."""
    if bars.is_empty():
        return {}
    return {r: part.sort("ts_event")["pnl"].to_numpy()
            for (r,), part in bars.partition_by("root", as_dict=True).items()}


def bars_per_day(bars: pl.DataFrame) -> dict[str, int]:
    """Each root's median test bars per trade date: a live day's length."""
    if bars.is_empty():
        return {}
    per = bars.with_columns(day=trade_date_expr()).group_by("root", "day").len()
    return {r: int(n) for r, n in per.group_by("root").agg(pl.col("len").median()).iter_rows()}


def decay_threshold(root: UPath, model: str, version: str, bars: pl.DataFrame,
                    thresholds: decay.DecayThresholds, resamples: int = 400,
                    seed: int = 0) -> float:
    """The decay check's CUSUM level for this champion (``models.monitoring.decay
    .calibrate``), computed once per version and settings and kept beside its reference."""
    if thresholds.threshold is not None:
        return float(thresholds.threshold)
    key = {"k_fraction": thresholds.k_fraction, "false_alarm": thresholds.false_alarm,
           "horizon_days": thresholds.horizon_days, "resamples": resamples, "seed": seed}
    path = reference_dir(root, model, version) / "decay.json"
    if path.is_file():
        cached = json.loads(path.read_text())
        if cached.get("settings") == key:
            return float(cached["threshold"])
    pnl = test_pnl(bars)
    h = decay.calibrate(pnl, bars_per_day(bars), decay.references(pnl), thresholds,
                        resamples=resamples, seed=seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"settings": key, "threshold": h}))
    return h


def by_day(frame: pl.DataFrame, names: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
    """Reference rows (with ``trade_date``) as trade date -> feature -> values, in date order."""
    if frame.is_empty():
        return {}
    parts = frame.sort("trade_date").partition_by("trade_date", as_dict=True, maintain_order=True)
    return {str(d): columns_of(part, names) for (d,), part in parts.items()}


def drift_null(root: UPath, model: str, version: str, what: str,
               days: Mapping[str, Mapping[str, np.ndarray]],
               thresholds: drift.DriftThresholds) -> drift.ReferenceNull:
    """``drift.reference_null`` of the reference ``days`` (leave one day out), computed once
    per champion version, reference and thresholds, and kept beside the reference."""
    key = {"days": list(days), "psi": thresholds.psi, "trend": thresholds.trend,
           "bins": thresholds.bins}
    path = reference_dir(root, model, version) / f"null_{what}.json"
    if path.is_file():
        cached = json.loads(path.read_text())
        if cached.get("settings") == key:
            return drift.ReferenceNull(tuple(cached["features"]), np.asarray(cached["psi"]),
                                       np.asarray(cached["ks"]), tuple(cached["moving"]))
    null = drift.reference_null(days, thresholds)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"settings": key, "features": list(null.features),
                                "psi": null.psi.tolist(), "ks": null.ks.tolist(),
                                "moving": list(null.moving)}))
    return null


def date_drift(root: UPath, fm: ForecastModel, cost_by_root: Mapping[str, float],
               live_start: date, day: date, rows: pl.DataFrame,
               thresholds: drift.DriftThresholds, days: int = 20, sample_rows: int = 20_000
               ) -> tuple[drift.DriftReport, drift.DriftReport]:
    """Feature drift of ``day`` and drift of its forecast ``rows`` (an agent's positions)
    against the reference dates before ``live_start``, each judged by how much the reference
    dates differ among themselves; empty reports where there is nothing to compare."""
    empty = drift.DriftReport(thresholds=thresholds)
    ref_f, ref_p, _ = drift_reference(root, fm, cost_by_root, live_start, days, sample_rows)
    names = list(fm.loaded.meta.get("observed_names", []))
    days_f = by_day(ref_f, names)
    if len(days_f) < 2:
        return empty, empty
    today = trade_dates.read_dates(root, FEATURES, day, day, columns=names)
    features_report = drift.feature_drift(
        days_f, columns_of(today if today is not None else pl.DataFrame(), names),
        drift_null(root, fm.model, fm.version, "features", days_f, thresholds), thresholds)
    what = "position" if fm.kind == "agent" else "forecast"
    days_p = by_day(ref_p, [what])
    if len(days_p) < 2 or rows.is_empty():
        return features_report, empty
    return features_report, drift.feature_drift(
        days_p, columns_of(rows, [what]),
        drift_null(root, fm.model, fm.version, "predictions", days_p, thresholds), thresholds)


def columns_of(frame: pl.DataFrame, names: Sequence[str]) -> dict[str, np.ndarray]:
    """The named columns as float arrays (those present)."""
    return {n: frame[n].cast(pl.Float64).to_numpy() for n in names if n in frame.columns}


__all__ = ["MONITORING", "bars_per_day", "by_day", "columns_of", "date_drift", "decay_threshold",
           "drift_null", "drift_reference", "live_start", "reference_dates", "reference_dir",
           "test_pnl"]
