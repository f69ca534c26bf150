"""One trade date's forecast rows: the champion on every decision bar of every root, with
the position the evaluation's trading rule takes, each row naming the model version.

A forecaster's rows carry its quantiles per horizon (``h<k>_q<p>``, log returns), the median
forecast of the decision horizon's return (``forecast``) and the no-trade band's position
(``models.trading_rules.band_positions``, as the walk-forward scores it), continued from the
position the previous date's live rows ended in, so a day is one stretch of the same book.
An agent's rows carry its action and position (``foxhunt_pipeline.serving.actions``); like
every stretch of its walk-forward, its day starts flat.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import polars as pl

from foxhunt_pipeline.forecasting.future_rows import FUTURE, with_future_rows
from foxhunt_pipeline.forecasting.inputs import DateInputs
from foxhunt_pipeline.serving.loaded import LoadedModel
from foxhunt_pipeline.serving.predict import quantile_column
from models.trading_rules import band_positions

#: columns of every stored forecast row, before the quantile columns
ROW_COLUMNS = {
    "trade_date": pl.Date, "ts_event": pl.Datetime("ns", "UTC"), "root": pl.String,
    "contract_seq": pl.Int32, "model": pl.String, "version": pl.String, "family": pl.String,
    "kind": pl.String, "made_at": pl.Datetime("us", "UTC"), "decision_horizon": pl.Int32,
    "cost": pl.Float64, "forecast": pl.Float64, "position": pl.Float64, "action": pl.Int8,
}


class ForecastInputError(ValueError):
    """The model cannot forecast these inputs; the message names the root or field."""


@dataclass(frozen=True)
class ForecastModel:
    """The model version that forecasts, and the rule its positions follow."""

    loaded: LoadedModel
    model: str  # registered name, e.g. foxhunt-tft
    version: str
    family: str
    decision_horizon: int | None = None  # None: the model's horizon (the protocol's default)
    threshold_k: float = 1.0

    @property
    def kind(self) -> str:
        return self.loaded.kind

    @property
    def horizon(self) -> int:
        return int(self.loaded.meta.get("horizon", 1))

    @property
    def decision(self) -> int:
        h = self.horizon if self.decision_horizon is None else int(self.decision_horizon)
        if not 1 <= h <= self.horizon:
            raise ForecastInputError(f"decision horizon {h} is outside the model's 1..{self.horizon}")
        return h

    @property
    def columns(self) -> list[str]:
        """The features columns it reads (and ``symbol``, for the contract's expiry)."""
        return [*self.loaded.input_columns, "symbol"]


def _continued(forecast: np.ndarray, cost: np.ndarray, runs: np.ndarray, k: float,
               held: float | None) -> np.ndarray:
    """``band_positions`` of one root's day, starting from the ``held`` position when given:
    a first bar that stands for the held position (beyond the band on its side, or a zero
    forecast for flat) is put before the day and dropped after."""
    if held is None or forecast.size == 0:
        return band_positions(forecast, cost, runs, k)
    band = k * float(cost[0])
    lead = float(np.sign(held)) * max(2.0 * band, 1e-12)
    pos = band_positions(np.concatenate([[lead], forecast]), np.concatenate([[cost[0]], cost]),
                         np.concatenate([[runs[0]], runs]), k)
    return pos[1:]


def forecast_rows(fm: ForecastModel, inputs: DateInputs, cost_by_root: Mapping[str, float],
                  made_at: datetime, held: Mapping[str, tuple[int, float]] | None = None,
                  bar_seconds: int = 60) -> pl.DataFrame:
    """Every decision bar of ``inputs.day`` for every root: ``ROW_COLUMNS`` and, for a
    forecaster, its quantile columns. ``held``: per root, the (contract_seq, position) the
    previous date's live rows ended in."""
    meta = fm.loaded.meta
    roots = list(meta.get("roots") or [])
    frame = inputs.frame if not roots else inputs.frame.filter(pl.col("root").is_in(roots))
    missing = sorted(set(frame["root"].unique().to_list()) - set(cost_by_root))
    if missing:
        raise ForecastInputError(f"no one-way cost for root(s) {', '.join(missing)} in the "
                                 "dataset's cost model")
    padded = with_future_rows(frame, fm.horizon, bar_seconds).with_columns(
        _row=pl.int_range(pl.len(), dtype=pl.Int64))
    model_in = padded.select(fm.loaded.input_columns)
    out = fm.loaded.predict(model_in)
    out = out.join(padded.select("root", "ts_event", "_row", "is_day", FUTURE),
                   on=["root", "ts_event"], how="left")
    out = out.filter(pl.col("is_day") & ~pl.col(FUTURE)).sort("root", "ts_event")
    out = out.with_columns(
        trade_date=pl.lit(inputs.day, dtype=pl.Date), model=pl.lit(fm.model),
        version=pl.lit(str(fm.version)), family=pl.lit(fm.family), kind=pl.lit(fm.kind),
        made_at=pl.lit(made_at).cast(pl.Datetime("us", "UTC")),
        decision_horizon=pl.lit(fm.decision, dtype=pl.Int32),
        cost=pl.col("root").replace_strict(dict(cost_by_root), return_dtype=pl.Float64))
    if fm.kind == "agent":
        out = out.with_columns(forecast=pl.lit(None, dtype=pl.Float64),
                               position=pl.col("position").cast(pl.Float64),
                               action=pl.col("action").cast(pl.Int8))
        return out.select(list(ROW_COLUMNS)).cast(ROW_COLUMNS)
    median = quantile_column(fm.decision, 0.5)
    if median not in out.columns:
        raise ForecastInputError(f"{fm.model} v{fm.version} has no median quantile "
                                 f"({median}): its quantiles are {meta.get('quantiles')}")
    quantiles = [c for c in out.columns if c.startswith("h") and "_q" in c]
    parts = []
    for part in out.partition_by("root", maintain_order=True):
        rows = part["_row"].to_numpy()
        seq = part["contract_seq"].to_numpy()
        brk = np.ones(rows.size, dtype=bool)
        brk[1:] = (np.diff(rows) != 1) | (seq[1:] != seq[:-1])
        prior = (held or {}).get(str(part["root"][0]))
        start = prior[1] if prior is not None and int(prior[0]) == int(seq[0]) else None
        pos = _continued(part[median].to_numpy(), part["cost"].to_numpy(), np.cumsum(brk),
                         fm.threshold_k, start)
        parts.append(part.with_columns(forecast=pl.col(median),
                                       position=pl.Series(pos, dtype=pl.Float64)))
    out = pl.concat(parts) if parts else out.with_columns(forecast=pl.col(median),
                                                          position=pl.lit(0.0))
    out = out.with_columns(action=pl.lit(None, dtype=pl.Int8))
    return out.select(*ROW_COLUMNS, *quantiles).cast(ROW_COLUMNS)


__all__ = ["ROW_COLUMNS", "ForecastInputError", "ForecastModel", "forecast_rows"]
