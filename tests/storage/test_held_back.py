"""One root at a time (issue 39): a bad print holds back its root on its trade date, never
the other roots of that date; news that stays is no bad print. On generated ES and CL with
a one-bar 5% ES print that reverts and a 3% CL news jump in the same session."""

from __future__ import annotations

from datetime import UTC, date, datetime

import polars as pl
import pytest
from upath import UPath

from foxhunt_pipeline.features import by_date
from foxhunt_pipeline.ingest.decode import ingest_dbn_file
from foxhunt_pipeline.storage import continuous_dates, trade_dates
from foxhunt_pipeline.storage.warehouse import raw_bars_partition_path
from foxhunt_pipeline.synthetic.events import parse
from foxhunt_pipeline.synthetic.generate import generate

DAY = date(2024, 1, 10)
PRINT = datetime(2024, 1, 10, 16, 0, tzinfo=UTC)
NEWS = datetime(2024, 1, 10, 15, 30, tzinfo=UTC)


def _warehouse(tmp_path, **events) -> tuple[UPath, list]:
    files = generate(tmp_path / "landing", days=3, roots=("ES", "CL"), start=date(2024, 1, 9), seed=4,
                     events=parse(**events))
    root = UPath(tmp_path / "warehouse")
    for f in files:
        ingest_dbn_file(f, raw_bars_partition_path(root.path, f.name), source_file=f.name)
    return root, files


def _stored(root: UPath, day: date) -> pl.DataFrame:
    return trade_dates.read_dates(root, continuous_dates.TABLE, day, day)


def test_a_bad_print_holds_back_its_root_only_and_news_passes(tmp_path):
    root, files = _warehouse(tmp_path, news=(f"CL@{NEWS:%Y-%m-%dT%H:%M}:+3%",),
                             bad_prints=(f"ES@{PRINT:%Y-%m-%dT%H:%M}:1.05",))
    days = continuous_dates.all_dates(root)
    build = continuous_dates.build_dates(root, days)
    assert build.held == {DAY: ["ES"]}
    assert build.held_back == f"ES {DAY}"
    (why,) = build.blocked.values()
    assert f"continuous_bars {DAY}: ES not stored" in why and "2024-01-10T16:00:00+00:00" in why
    assert "a jump the next bars do not confirm" in why and "glbx-mdp3-20240110" in why
    # CL's bars of the date are stored, its news bar among them, and every other date whole
    stored = _stored(root, DAY)
    assert set(stored["root"]) == {"CL"} and NEWS in stored["ts_event"].to_list()
    for d in days:
        if d != DAY:
            assert set(_stored(root, d)["root"]) == {"ES", "CL"}, d
    # features: CL has rows on the date, ES none (a hole in ES's data, not filled)
    by_date.build_dates(root, days[0], days[-1])
    feats = trade_dates.read_dates(root, by_date.TABLE, DAY, DAY)
    assert feats is not None and set(feats["root"]) == {"CL"}


@pytest.mark.parametrize("factor", [1000.0, 2.0, 0.1])
def test_the_previous_version_of_a_held_root_stays(tmp_path, factor):
    """A date was stored; its file delivered again with a 1000x, 2x or slipped-decimal print
    leaves ES's stored bars of the date as they were and stores CL's."""
    root, _ = _warehouse(tmp_path)
    days = continuous_dates.all_dates(root)
    continuous_dates.build_dates(root, days)
    before = _stored(root, DAY).sort("root", "ts_event")
    _, bad = _warehouse(tmp_path / "again", bad_prints=(f"ES@{PRINT:%Y-%m-%dT%H:%M}:{factor}",))
    name = "glbx-mdp3-20240110.ohlcv-1m.dbn.zst"
    src = next(f for f in bad if f.name == name)
    ingest_dbn_file(src, raw_bars_partition_path(root.path, name), source_file=name)  # re-ingested
    build = continuous_dates.build_dates(root, [DAY])
    assert build.held == {DAY: ["ES"]}
    assert build.first_jumps["ts_event"][0] == PRINT
    after = _stored(root, DAY).sort("root", "ts_event")
    assert after.filter(pl.col("root") == "ES").equals(before.filter(pl.col("root") == "ES"))
    assert after.filter(pl.col("root") == "CL").equals(before.filter(pl.col("root") == "CL"))
