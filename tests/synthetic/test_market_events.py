"""The generator's opt-in market events (issue 39): an exchange outage, a data hole in one
root, a news jump that persists, a bad print that reverts and a thin holiday session, each
where it was asked for and nowhere else; without them the files are what they always were."""

from __future__ import annotations

import hashlib
from datetime import date
from pathlib import Path

import numpy as np
import pytest

from foxhunt_pipeline.synthetic.events import MarketEvents, parse
from foxhunt_pipeline.synthetic.generate import generate, iter_days

# sha256 over the names and bytes of the DBN files of generate(days=2, roots=("ES", "CL"),
# start=2024-01-09, seed=4), as the generator wrote them before events existed: benchmarks
# and landed homes depend on the same seed giving the same files
DEFAULT_FILES_SHA256 = "59d19c89ab13f96d739eacf3db26f6cc169abb68055654051fd5293ecf25b4e6"


def _digest(out: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(out.glob("*.dbn.zst")):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def test_without_events_the_files_are_byte_for_byte_those_of_before(tmp_path):
    kw = dict(days=2, roots=("ES", "CL"), start=date(2024, 1, 9), seed=4)
    generate(tmp_path / "none", **kw)
    generate(tmp_path / "empty", events=MarketEvents(), **kw)
    assert _digest(tmp_path / "none") == _digest(tmp_path / "empty") == DEFAULT_FILES_SHA256


def _day(events: MarketEvents | None, day: date = date(2024, 1, 10)) -> np.ndarray:
    for d, recs, _ in iter_days(3, ("ES", "CL"), start=date(2024, 1, 9), seed=4, events=events):
        if d == day:
            return recs
    raise AssertionError(day)


def _at(recs: np.ndarray, when: str) -> np.ndarray:
    return recs[recs["ts_event"].astype("datetime64[ns]") == np.datetime64(when)]


ES_FRONT, CL_FRONT = 100291, 130290  # ESH4, CLG4 on 2024-01-10


def test_each_event_changes_its_own_bars_only():
    plain = _day(None)
    events = parse(outages=("2024-01-10T08:00/2024-01-10T11:00", "2024-01-10T14:00/2024-01-10T14:45@CL"),
                   news=("CL@2024-01-10T15:30:+3%",), bad_prints=("ES@2024-01-10T16:00:1.05",))
    recs = _day(events)
    ts = recs["ts_event"].astype("datetime64[ns]")
    # the outage: no bar of any root; the hole: none of CL's, ES trades on
    assert not ((ts >= np.datetime64("2024-01-10T08:00")) & (ts < np.datetime64("2024-01-10T11:00"))).any()
    in_hole = (ts >= np.datetime64("2024-01-10T14:00")) & (ts < np.datetime64("2024-01-10T14:45"))
    assert in_hole.any() and set(recs["instrument_id"][in_hole] // 1000).isdisjoint({130, 135})
    # the news: CL's front opens at the old level and closes 3% up, and trades on up there
    before, bar, after = (_at(recs, t) for t in ("2024-01-10T15:29", "2024-01-10T15:30", "2024-01-10T15:31"))
    front = [r[r["instrument_id"] == CL_FRONT][0] for r in (before, bar, after)]
    assert front[1]["open"] == front[0]["close"]
    assert front[1]["close"] / front[1]["open"] == pytest.approx(1.03, abs=0.003)
    assert abs(front[2]["close"] / front[1]["close"] - 1) < 0.003
    # the bad print: ES's outrights print 5% up for one bar, then trade where they were
    spike, next_bar = _at(recs, "2024-01-10T16:00"), _at(recs, "2024-01-10T16:01")
    es = spike[spike["instrument_id"] == ES_FRONT][0]
    same = _at(plain, "2024-01-10T16:00")
    assert es["close"] / same[same["instrument_id"] == ES_FRONT][0]["close"] == pytest.approx(1.05, abs=1e-4)
    plain_next = _at(plain, "2024-01-10T16:01")
    assert next_bar[next_bar["instrument_id"] == ES_FRONT][0]["close"] == \
        plain_next[plain_next["instrument_id"] == ES_FRONT][0]["close"]
    # ES before the news and outside the outage is untouched
    es_before = (recs["instrument_id"] // 1000 == 100) & (ts < np.datetime64("2024-01-10T08:00"))
    plain_ts = plain["ts_event"].astype("datetime64[ns]")
    assert np.array_equal(recs[es_before], plain[(plain["instrument_id"] // 1000 == 100)
                                                 & (plain_ts < np.datetime64("2024-01-10T08:00"))])


def test_a_holiday_session_is_thin_but_whole():
    """A hundredth of the usual volume: many minutes without a trade, none of them long."""
    plain = _day(None, date(2024, 1, 11))
    recs = _day(parse(holidays=("2024-01-11:0.01",)), date(2024, 1, 11))
    front = recs[recs["instrument_id"] == ES_FRONT]
    assert front.size < 0.8 * (plain["instrument_id"] == ES_FRONT).sum()
    ts = front["ts_event"].astype("datetime64[ns]")
    session = ts < np.datetime64("2024-01-11T22:00")  # trade date 2024-01-11 ends at 16:00 CT
    gaps = np.diff(ts[session]).astype("timedelta64[m]").astype(int)
    assert gaps.max() > 1 and gaps.max() <= 30


@pytest.mark.parametrize("bad", [
    dict(outages=("2024-01-10T14:00",)), dict(outages=("2024-01-10T14:00/2024-01-10T13:00",)),
    dict(news=("CL:3%",)), dict(bad_prints=("ES@2024-01-10T16:00:-2",)),
])
def test_a_malformed_event_is_refused_by_its_text(bad):
    with pytest.raises(ValueError, match="2024|CL|ES"):
        parse(**bad)
