"""What the champion did live up to one trade date: its cumulative live metrics, the band
its walk-forward predicts for that many days and the decay detector's verdict (the
``live_performance`` asset's work; ``champ`` is a ``resources.champion.Champion``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any, Protocol

import numpy as np
import polars as pl
from upath import UPath

from foxhunt_pipeline.forecasting.reference import decay_threshold, test_pnl
from foxhunt_pipeline.storage import forecast_views as views
from foxhunt_pipeline.storage import object_store
from models.monitoring import band as bands
from models.monitoring import decay, live


class LiveSettings(Protocol):
    """The decay detector's thresholds and the band's bootstrap (``live_performance``'s Config)."""

    resamples: int
    seed: int

    def thresholds(self) -> decay.DecayThresholds: ...


@dataclass(frozen=True)
class LiveDay:
    """What the champion did live up to one trade date."""

    day: date
    rows: list[dict]  # cumulative metrics per day and scope
    band: bands.Band | None
    result: decay.DecayResult | None
    false_alarm: float
    equity: list[float]
    sharpe: list[float]


def live_bars(warehouse_root: UPath, champ: Any, day: date) -> live.LiveBars | None:
    """The champion version's realised live rows from its live start to ``day``."""
    root = warehouse_root
    if champ.live_start is None or day < champ.live_start:
        return None
    glob = {t: str(root / t / "trade_date=*" / "*.parquet") for t in (views.TABLE, "features")}
    frame = views.realised_frame(glob[views.TABLE], glob["features"], champ.live_start, day,
                                 filesystem=None if object_store.is_local(root) else root.fs)
    if frame.is_empty():
        return None
    frame = frame.filter((pl.col("model") == champ.ref.model)
                         & (pl.col("version") == champ.ref.version)).sort("ts_event")
    if frame.is_empty():
        return None

    def col(name: str) -> np.ndarray:
        return frame[name].cast(pl.Float64).fill_null(np.nan).to_numpy()

    return live.LiveBars(frame["trade_date"].cast(pl.String).to_numpy(),
                         frame["root"].to_numpy(), col("pnl"), col("forecast"),
                         col("realised_return"), col("pinball"))


def live_day(warehouse_root: UPath, champ: Any, day: date,
             config: LiveSettings) -> LiveDay | None:
    """The champion's live metrics, band and decay verdict up to ``day``; ``None`` before
    it has live rows."""
    bars = live_bars(warehouse_root, champ, day)
    if bars is None:
        return None
    rows = live.cumulative_by_day(bars, champ.bars_per_year)
    days, counts = live.live_bar_counts(bars)
    test = test_pnl(champ.test_bars)
    band = (bands.rolling_band(test, counts, days, champ.bars_per_year,
                               resamples=config.resamples, seed=config.seed) if test else None)
    result, far = None, float("nan")
    if test:
        refs = decay.references(test)
        th = config.thresholds()
        h = decay_threshold(warehouse_root, champ.ref.model, champ.ref.version,
                            champ.test_bars, th, config.resamples, config.seed)
        result = decay.detect(bars.pnl, bars.root, refs, h, th)
        used = np.isfinite(bars.pnl)
        steps = decay.in_control_steps(test, bars.root[used], refs, th.k_fraction,
                                       config.resamples, np.random.default_rng(config.seed))
        far = decay.false_alarm_rate(steps, h)
    pooled = [r for r in rows if r["scope"] == live.POOLED]
    return LiveDay(day, rows, band, result, far, [r["total_log_return"] for r in pooled],
                   [r["sharpe"] for r in pooled])


def decay_message(champ: Any, ld: LiveDay | None, th: decay.DecayThresholds) -> str:
    """One line: the verdict, the CUSUM against its level and that level's false-alarm rate."""
    if ld is None or ld.result is None:
        return (f"{champ.ref.key}: no live bars yet (live from {champ.live_start or '-'})"
                if champ.test_bars.height else
                f"{champ.ref.key}: no walk-forward test bars stored to compare with")
    r = ld.result
    verdict = (f"DECAY: live P&L fell below the backtest; CUSUM {r.peak:.1f} passed "
               f"{r.threshold:.1f} after {r.first_alarm + 1} of {r.bars} live bars"
               if r.alarm else f"no decay: CUSUM {r.last:.1f} (peak {r.peak:.1f}) < "
               f"{r.threshold:.1f} over {r.bars} live bars")
    return (f"{champ.ref.key} since {champ.live_start}: {verdict} (level set for a "
            f"{th.false_alarm:.0%} false-alarm rate over {th.horizon_days} live days; over as "
            f"many bars as so far: {ld.false_alarm:.1%})")
