"""Holes inside a session (issue 39), on generated data with an exchange outage, a data
hole in one root and a short stretch without trades: more open market without a bar than
the root's no-trade limit (30 minutes for these roots) is a hole like a missing session (no
filled rows, no feature, return, target or window across it, a warning naming root, start
and end); a shorter stretch is filled as before."""

from __future__ import annotations

from datetime import UTC, date, datetime

import numpy as np
import polars as pl
from upath import UPath

from foxhunt_pipeline.features import by_date
from foxhunt_pipeline.features.dataset import DatasetConfig, build_training_dataset
from foxhunt_pipeline.features.schema import validate_features
from foxhunt_pipeline.ingest.decode import ingest_dbn_file
from foxhunt_pipeline.instruments.sessions import quiet_limit
from foxhunt_pipeline.storage import continuous_dates, trade_dates
from foxhunt_pipeline.storage.warehouse import raw_bars_partition_path
from foxhunt_pipeline.synthetic.events import parse
from foxhunt_pipeline.synthetic.generate import generate
from tests.features.test_gaps import SMALL, check_nothing_spans_a_hole

OUTAGE = ("2024-01-10T08:00", "2024-01-10T11:00")  # every root, inside the session
CL_HOLE = ("2024-01-10T14:00", "2024-01-10T14:45")  # CL's data only: 45 minutes
ES_QUIET = ("2024-01-10T15:00", "2024-01-10T15:20")  # ES without a bar for 20 minutes


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _home(tmp_path) -> tuple[UPath, by_date.FeatureBuild]:
    events = parse(outages=("/".join(OUTAGE), "/".join(CL_HOLE) + "@CL", "/".join(ES_QUIET) + "@ES"))
    files = generate(tmp_path / "landing", days=4, roots=("ES", "CL"), start=date(2024, 1, 9), seed=4,
                     events=events)
    root = UPath(tmp_path / "warehouse")
    for f in files:
        ingest_dbn_file(f, raw_bars_partition_path(root.path, f.name), source_file=f.name)
    days = continuous_dates.all_dates(root)
    continuous_dates.build_dates(root, days)
    build = by_date.build_dates(root, days[0], days[-1], SMALL, validate=lambda f: validate_features(f).passed)
    return root, build


def _inside(rows: pl.DataFrame, span: tuple[str, str]) -> pl.DataFrame:
    return rows.filter(pl.col("ts_event").is_between(_utc(span[0]), _utc(span[1]), closed="left"))


def test_an_outage_is_a_hole_and_a_short_quiet_stretch_is_filled(tmp_path):
    assert quiet_limit("ES") == quiet_limit("CL") == 30
    root, build = _home(tmp_path)
    assert build.rows  # the features of every date passed their contract
    rows = check_nothing_spans_a_hole(root)
    # no row inside the outage, nor inside CL's hole
    assert _inside(rows, OUTAGE).is_empty()
    assert _inside(rows.filter(pl.col("root") == "CL"), CL_HOLE).is_empty()
    # the stretches are cut there: ES twice that day (the outage), CL three times (and its hole)
    day = rows.filter(pl.col("_td") == date(2024, 1, 10))
    assert day.filter(pl.col("root") == "ES")["_stretch"].n_unique() == 2
    assert day.filter(pl.col("root") == "CL")["_stretch"].n_unique() == 3
    # ES's 20 quiet minutes are filled with the last close, inside one stretch
    quiet = _inside(rows.filter(pl.col("root") == "ES"), ES_QUIET)
    assert quiet.height == 20 and quiet["is_filled"].sum() >= 19 and quiet["_stretch"].n_unique() == 1
    # and said: the root, the last bar before and the first after each hole
    said = " ".join(text for _, text in build.notes)
    assert "ES has 1 hole(s) inside its sessions" in said and "2024-01-10 07:59 .. 2024-01-10 11:00 UTC" in said
    assert "CL has 2 hole(s)" in said and "2024-01-10 13:59 .. 2024-01-10 14:45 UTC" in said


def test_no_training_window_spans_an_outage(tmp_path):
    root, _ = _home(tmp_path)
    feats = trade_dates.read_dates(root, by_date.TABLE)
    data = build_training_dataset(feats, DatasetConfig(fractions=(0.5, 0.25, 0.25)),
                                  close_prices=trade_dates.read_dates(root, continuous_dates.TABLE))
    assert data.splits["train"].window_starts.size > 0
    lookback, horizon = data.meta["lookback"], data.meta["horizon"]
    outage = [np.datetime64(t, "ns").astype(np.int64) for t in OUTAGE]
    for split in data.splits.values():
        ts = np.asarray(split.ts_event)
        starts = np.asarray(split.window_starts)
        if starts.size == 0:
            continue
        first, last = ts[starts], ts[starts + lookback + horizon - 1]
        assert not ((first < outage[0]) & (last >= outage[1])).any()
        seg = np.asarray(split.segment)
        assert (seg[starts] == seg[starts + lookback + horizon - 1]).all()
