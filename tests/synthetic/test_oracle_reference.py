"""The oracle as the leaderboard's reference row: the sidecars of the protocol's test trade
dates and roots, read through UPath (object stores too); no row on real data."""

import json
from datetime import date, timedelta
from pathlib import Path

import pytest
from upath import UPath

from foxhunt_pipeline.synthetic import oracle_summary
from foxhunt_pipeline.synthetic.oracle_reference import oracle_reference, trade_date_of
from models.evaluation.leaderboard import leaderboard_markdown
from tests.oracle_sidecars import land_sidecars

DAYS = [date(2024, 1, 8) + timedelta(days=k) for k in range(5)]  # Mon .. Fri


def pooled(model: str, sharpe: float, **kw) -> dict:
    """A leaderboard row whose test period is trade dates 2024-01-10 .. 2024-01-11: its first
    bar is in the evening session of 01-09 (UTC), which belongs to trade date 01-10."""
    return {"model": model, "family": kw.pop("family", "tft"), "version": "1", "fold": "pooled",
            "protocol_id": "p", "sharpe": sharpe, "sharpe_ci_low": sharpe - 0.5, "n_trades": 30.0,
            "test_start": "2024-01-09T23:30:00Z", "test_end": "2024-01-11T21:59:00Z",
            "sharpe_by_root": json.dumps({"ES": sharpe}), **kw}


def test_trade_dates_of_test_bars():
    assert trade_date_of("2024-01-09T23:30:00Z") == date(2024, 1, 10)  # 17:30 CT
    assert trade_date_of("2024-01-09T22:59:00Z") == date(2024, 1, 9)
    assert trade_date_of("2024-07-09T22:30:00Z") == date(2024, 7, 10)  # CDT


def test_oracle_row_covers_the_test_dates_and_roots_of_the_protocol(tmp_path: Path):
    land_sidecars(tmp_path, DAYS)
    rows = [pooled("foxhunt-tft", 1.0), pooled("baseline:climatology", 0.5, family="baseline")]
    row, note = oracle_reference(tmp_path, rows)
    want = oracle_summary(tmp_path, start=date(2024, 1, 10), end=date(2024, 1, 11), roots=["ES"])
    whole = oracle_summary(tmp_path)
    assert row is not None and want is not None and whole is not None
    assert row["model"] == "oracle" and row["family"] == "reference"
    assert row["sharpe"] == pytest.approx(want["pooled"]["sharpe"])
    assert row["sharpe"] != pytest.approx(whole["pooled"]["sharpe"])  # not every landed day
    assert row["n_trades"] == want["pooled"]["trades"] and set(row) >= {"sharpe_ES"}
    assert "sharpe_ZN" not in row  # the protocol scored ES only
    assert "2024-01-10 .. 2024-01-11" in note and "never champion" in note
    assert "Bonferroni" in note and "1 tick" in note

    # a reference, not a candidate: listed last whatever its Sharpe
    table = leaderboard_markdown(rows, "sharpe", references=[row]).splitlines()
    assert table[-1].startswith("| oracle | reference |") and len(table) == 2 + len(rows) + 1


def test_the_landing_zone_is_read_through_upath(tmp_path: Path):
    land_sidecars(tmp_path / "local", DAYS)
    remote = UPath("memory://foxhunt-oracle-test/landing")
    for f in (tmp_path / "local").iterdir():
        (remote / f.name).write_bytes(f.read_bytes())
    try:
        rows = [pooled("foxhunt-tft", 1.0)]
        (local_row, _), (remote_row, note) = (oracle_reference(tmp_path / "local", rows),
                                              oracle_reference(remote, rows))
        assert remote_row is not None and remote_row == local_row and "2024-01-10" in note
    finally:
        remote.fs.rm(str(remote), recursive=True)


def test_no_row_on_real_data_and_a_note_instead(tmp_path: Path):
    land_sidecars(tmp_path, DAYS, with_sidecar=False)
    row, note = oracle_reference(tmp_path, [pooled("foxhunt-tft", 1.0)])
    assert row is None and "\n" not in note
    assert "No `oracle` row" in note and "2024-01-10 .. 2024-01-11" in note
    assert oracle_reference(tmp_path / "nothing-landed", [pooled("m", 1.0)])[0] is None


def test_a_broken_sidecar_costs_the_row_not_the_leaderboard(tmp_path: Path):
    (f, *_) = land_sidecars(tmp_path, DAYS)
    side = f.with_name(f.name + ".generator.json")
    side.write_text("{broken")
    row, note = oracle_reference(tmp_path, [pooled("foxhunt-tft", 1.0)])
    assert row is None and side.name in note
    side.write_text(json.dumps({"format_version": 1, "day": "2024-01-10", "generator": {},
                                "oracle_per_root": {}}))  # another shape: no oracle config
    row, note = oracle_reference(tmp_path, [pooled("foxhunt-tft", 1.0)])
    assert row is None and "unreadable" in note and str(tmp_path) in note
