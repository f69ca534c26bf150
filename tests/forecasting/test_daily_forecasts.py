"""One trade date's forecasts: causal (a bar's forecast is what it was when the history
ended at that bar), read from the date and the lookback before it only, refused for a date
whose features are missing, held back or stale, and never overwritten by another version."""

from __future__ import annotations

import os
import time
from datetime import UTC, date, datetime
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest
from upath import UPath

from foxhunt_pipeline.features.calendar_inputs import KNOWN_NAMES
from foxhunt_pipeline.forecasting.daily import forecast_date
from foxhunt_pipeline.forecasting.frame import _continued
from foxhunt_pipeline.forecasting.freshness import ForecastRefused, NoData
from foxhunt_pipeline.forecasting.future_rows import FUTURE, with_future_rows
from foxhunt_pipeline.forecasting.inputs import read_date_inputs
from foxhunt_pipeline.storage import continuous_dates, object_store, trade_dates
from foxhunt_pipeline.storage.forecast_views import TABLE, create_views, realised_frame
from models.trading_rules import band_positions
from tests.forecasting.conftest import DAYS, HORIZON, LOOKBACK, Home

pytestmark = pytest.mark.usefixtures("one_torch_thread")
T0 = datetime(2024, 3, 9, tzinfo=UTC)


def _features(root: UPath, day: date) -> pl.DataFrame:
    return trade_dates.read_dates(root, "features", day, day).sort("root", "ts_event")


def _globs(root: UPath) -> tuple[str, str]:
    return (str(root / TABLE / "trade_date=*" / "*.parquet"),
            str(root / "features" / "trade_date=*" / "*.parquet"))


def test_known_future_rows_are_the_calendar_rows_the_table_gets_later(home: Home):
    """Built from the clock and the calendar after a bar, the next rows' k_* equal the rows
    the features table stores once those bars exist: inside a session and across the
    daily halt into the next session."""
    table = trade_dates.read_dates(UPath(home.warehouse), "features", DAYS[1], DAYS[2])
    table = table.sort("root", "ts_event")
    ts = table["ts_event"]
    halt = int(np.flatnonzero(np.diff(ts.dt.epoch("s").to_numpy()) > 600)[0])  # last bar of DAYS[1]
    steps = np.diff(ts.dt.epoch("s").to_numpy())
    for i in (100, 700, halt - 2, halt):
        if i != halt and not (steps[i:i + HORIZON] == 60).all():
            continue
        pad = with_future_rows(table.head(i + 1), HORIZON).filter(pl.col(FUTURE))
        real = table.slice(i + 1, HORIZON)
        assert pad["ts_event"].to_list() == real["ts_event"].to_list(), i
        assert pad.select(KNOWN_NAMES).equals(real.select(KNOWN_NAMES)), i


def test_a_date_reads_only_the_lookback_before_it(home: Home):
    inputs = read_date_inputs(UPath(home.warehouse), DAYS[2], LOOKBACK)
    earlier = inputs.frame.filter(~pl.col("is_day"))
    assert inputs.warmup_dates == (DAYS[1],)
    assert earlier.height == LOOKBACK - 1
    assert inputs.day_rows.equals(_features(UPath(home.warehouse), DAYS[2]).with_columns(
        is_day=pl.lit(True)).select(inputs.day_rows.columns))


@pytest.mark.parametrize("family", ["tft", "lightgbm"])
def test_a_forecast_uses_only_bars_up_to_its_close(home: Home, tmp_path: Path, family: str):
    """Cut the history after bar t (and drop every later date): the forecasts and positions
    of the bars up to t are the same, whether the next date is stored or not."""
    fm = home.model(family=family)
    full = forecast_date(home.copy(tmp_path / "full"), DAYS[2], fm, home.costs, T0).rows
    assert full.height > 1000 and full["trade_date"].unique().to_list() == [DAYS[2]]
    assert (full["model"] == f"foxhunt-{family}").all() and (full["version"] == "1").all()
    day = _features(UPath(home.warehouse), DAYS[2])
    for t in (LOOKBACK + 5, day.height // 2, day.height - 1):
        cut = home.copy(tmp_path / f"cut{t}")
        for later in DAYS[3:]:
            for p in trade_dates.date_parts(cut, "features")[later]:
                p.unlink()
        trade_dates.write_part(cut, "features", DAYS[2], day.head(t + 1))
        _same_stamp_order(cut, DAYS[2])
        rows = forecast_date(cut, DAYS[2], fm, home.costs, T0).rows
        upto = full.filter(pl.col("ts_event") <= day["ts_event"][t])
        assert rows.height == upto.height, t
        quantiles = [c for c in rows.columns if c.startswith("h")]
        np.testing.assert_allclose(rows.select(quantiles).to_numpy(),
                                   upto.select(quantiles).to_numpy(), rtol=1e-6, atol=1e-9)
        assert rows["position"].to_list() == upto["position"].to_list(), t


def _same_stamp_order(root: UPath, day: date) -> None:
    """A rewritten features date stays newer than its continuous bars (as a rebuild leaves it)."""
    later = time.time() + 1
    for p in trade_dates.date_parts(root, "features")[day]:
        os.utime(p.path, (later, later))


def test_the_book_continues_from_the_previous_dates_position(home: Home, tmp_path: Path):
    """Forecasting date after date gives the positions of the band rule run over the dates as
    one stretch: each day starts from the position the day before ended in."""
    probe = forecast_date(home.copy(tmp_path / "probe"), DAYS[1], home.model(family="lightgbm"),
                          home.costs, T0).rows
    # a band that half the forecasts clear: flat, long and short all occur
    k = float(np.median(np.abs(probe["forecast"].to_numpy())) / home.costs["ES"])
    root = home.copy(tmp_path / "w")
    fm = home.model(family="lightgbm", threshold_k=k)
    a = forecast_date(root, DAYS[1], fm, home.costs, T0).rows
    b = forecast_date(root, DAYS[2], fm, home.costs, T0).rows
    both = pl.concat([a, b])
    ts = both["ts_event"].dt.epoch("s").to_numpy()
    run = np.cumsum(np.concatenate([[True], np.diff(ts) > 3600 * 3]))  # one stretch here
    want = band_positions(both["forecast"].to_numpy(), both["cost"].to_numpy(),
                          np.ones_like(run), fm.threshold_k)
    assert both["position"].to_list() == want.tolist()
    assert set(np.unique(want)) == {-1.0, 0.0, 1.0}  # it trades, so the test can fail


@pytest.mark.parametrize(("held", "want"), [(1.0, [1, 1, -1, 0]), (0.0, [0, 0, -1, 0]),
                                            (-1.0, [0, 0, -1, 0]), (None, [0, 0, -1, 0])])
def test_a_held_position_is_kept_while_the_forecast_keeps_its_sign(held, want):
    """The day's first bars inside the band keep a long held from the day before (the band
    rule holds until the sign turns); a short or flat book stays out."""
    f = np.array([0.5, 0.5, -2.0, 0.5])
    got = _continued(f, np.ones(4), np.ones(4, dtype=int), 1.0, held)
    assert got.tolist() == want


def test_refused_dates_are_named(home: Home, tmp_path: Path):
    root = home.copy(tmp_path / "w")
    fm = home.model()
    with pytest.raises(NoData, match="2024-03-11: no landed file"):
        forecast_date(root, date(2024, 3, 11), fm, home.costs)
    # held back: a landed file holding the date was ingested after it was built
    raw = object_store.raw_bars_partition_upath(root, "late.dbn.zst")
    object_store.write_parquet(_features(root, DAYS[3]).select("ts_event").head(5), raw)
    with pytest.raises(ForecastRefused, match=r"2024-03-07: held back.*late\.dbn\.zst"):
        forecast_date(root, DAYS[3], fm, home.costs)
    # continuous bars stored, features not (the features build failed)
    for p in trade_dates.date_parts(root, "features")[DAYS[4]]:
        p.unlink()
    with pytest.raises(ForecastRefused, match="2024-03-08: its continuous_bars are stored but"):
        forecast_date(root, DAYS[4], fm, home.costs)
    # stale: late data moved its front contract
    object_store.write_parquet(pl.DataFrame({"day": [DAYS[2]]}),
                               continuous_dates.state_path(root, "stale_dates"))
    with pytest.raises(ForecastRefused, match="2024-03-06: stale"):
        forecast_date(root, DAYS[2], fm, home.costs)
    assert not trade_dates.date_parts(root, TABLE)  # nothing was written


def test_a_new_version_writes_its_own_rows_and_the_first_stays_shown(home: Home, tmp_path: Path):
    root = home.copy(tmp_path / "w")
    first = forecast_date(root, DAYS[2], home.model("1"), home.costs, T0)
    second = forecast_date(root, DAYS[2], home.model("2"), home.costs, datetime(2024, 3, 10, tzinfo=UTC))
    again = forecast_date(root, DAYS[2], home.model("1"), home.costs, datetime(2024, 3, 11, tzinfo=UTC))
    assert not first.replaced and not second.replaced and again.replaced
    assert first.path != second.path and again.path == first.path
    forecasts, features = _globs(root)
    with duckdb.connect() as con:
        create_views(con, forecasts, features)
        shown = con.sql("select distinct version, made_at from forecasts").fetchall()
        every = con.sql("select version, count(*) from all_forecasts group by 1 order by 1").fetchall()
    assert shown == [("1", T0)]  # v1 made the date first; its re-forecast kept its made_at
    assert [v for v, _ in every] == ["1", "2"] and every[0][1] == every[1][1] == first.rows.height


def test_realised_fills_in_as_the_outcomes_arrive(home: Home, tmp_path: Path):
    root = home.copy(tmp_path / "w")
    fm = home.model()
    for d in DAYS[1:3]:
        forecast_date(root, d, fm, home.costs, T0)
    forecasts, features = _globs(root)
    real = realised_frame(forecasts, features)
    y = trade_dates.read_dates(root, "features", DAYS[1], DAYS[2]).select(
        "root", "ts_event", "y_1", "y_2", "y_3")
    joined = real.join(y, on=["root", "ts_event"])
    pos = joined["position"].to_numpy()
    prev = np.concatenate([[0.0], pos[:-1]])
    want = pos * joined["y_1"].to_numpy() - joined["cost"].to_numpy() * np.abs(pos - prev)
    np.testing.assert_allclose(joined["pnl"].to_numpy(), want, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(joined["realised_return"].to_numpy(), joined["y_3"].to_numpy())
    quantiles = [(h, q) for h in (1, 2, 3) for q in (10, 20, 30, 40, 50, 60, 70, 80, 90)]
    err = np.stack([joined[f"y_{h}"].to_numpy() - joined[f"h{h}_q{q}"].to_numpy()
                    for h, q in quantiles], axis=1)
    qs = np.array([q / 100 for _, q in quantiles])
    want_pinball = np.maximum(qs * err, (qs - 1) * err).mean(axis=1)
    np.testing.assert_allclose(joined["pinball"].to_numpy(), want_pinball, rtol=1e-6)
    # the last bars' targets need the next date: not realised yet, NULL rather than 0
    last = real.filter(pl.col("trade_date") == DAYS[2]).tail(1)
    trade_dates.write_part(root, "features", DAYS[2],
                           _features(root, DAYS[2]).with_columns(pl.lit(None, pl.Float32).alias("y_1")))
    assert realised_frame(forecasts, features).filter(
        pl.col("ts_event") == last["ts_event"][0])["pnl"].is_null().all()
