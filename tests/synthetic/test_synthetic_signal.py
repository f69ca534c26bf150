"""The generator's latent drift: observable through past returns, paying after costs for an
oracle that knows it, gone under ``random_walk``; its parameters and the oracle's statistics
land beside each file (``<file>.generator.json``) and ``oracle_summary`` reads them back."""

from __future__ import annotations

import json
import re
from datetime import date
from pathlib import Path

import databento as db
import numpy as np
import pytest

from foxhunt_pipeline.instruments.specs import is_spread
from foxhunt_pipeline.synthetic import generate, iter_days, oracle_summary
from foxhunt_pipeline.synthetic.dbn_writer import LandedFileConflict
from foxhunt_pipeline.synthetic.market import tick_moves
from foxhunt_pipeline.synthetic.run_metadata import read_sidecar, sidecar_path
from foxhunt_pipeline.synthetic.signal import (
    DRIFT_HALF_LIFE_S,
    DRIFT_SD,
    OracleDay,
    mean_ticks,
    oracle_day,
    oracle_positions,
)

DAYS = dict(days=8, roots=("ES",), start=date(2024, 1, 2), seed=5)


def _front_closes(random_walk: bool, break_at: date | None = None) -> np.ndarray:
    """Per-minute closes (in ticks) of ES's most traded outright, each UTC day."""
    out = []
    for _, recs, maps in iter_days(random_walk=random_walk, break_at=break_at,
                                   **DAYS):  # type: ignore[arg-type]
        if recs.size == 0:
            continue
        ids = {m.instrument_id: m.raw_symbol for m in maps if not is_spread(m.raw_symbol)}
        vol = {i: int(recs["volume"][recs["instrument_id"] == i].sum()) for i in ids}
        front = recs[recs["instrument_id"] == max(vol, key=vol.get)]
        out.append(front["close"].astype(np.float64) / 0.25e9)
    return np.concatenate(out)


def _momentum_ic(close: np.ndarray, back: int = 30, ahead: int = 5) -> float:
    """Correlation of the past ``back``-bar move with the next ``ahead``-bar move, on
    non-overlapping forward windows."""
    t = np.arange(back, close.size - ahead, ahead)
    return float(np.corrcoef(close[t] - close[t - back], close[t + ahead] - close[t])[0, 1])


def test_the_drift_shows_through_past_returns_and_random_walk_removes_it() -> None:
    ic_default, ic_walk = _momentum_ic(_front_closes(False)), _momentum_ic(_front_closes(True))
    noise = 1 / np.sqrt(8 * 1380 / 5)  # sd of a correlation over that many independent pairs
    assert ic_default > 4 * noise, ic_default
    assert abs(ic_walk) < 3 * noise, ic_walk


def test_break_at_turns_the_signal_off_from_that_trade_date(tmp_path: Path) -> None:
    """``--break-at``: every bar before the trade date's first instant (17:00 CT the day
    before) is what the plain run lands, the oracle finds nothing to trade after it, and the
    momentum the drift gives is gone (the regime change the decay checks must see)."""
    kw = dict(days=3, roots=("ES",), start=date(2024, 1, 8), seed=5)
    plain = generate(tmp_path / "plain", **kw)  # type: ignore[arg-type]
    broken = generate(tmp_path / "broken", break_at=date(2024, 1, 9), **kw)  # type: ignore[arg-type]
    cut = int(np.datetime64("2024-01-08T23:00:00", "ns").astype(np.int64))  # 17:00 CT, CST
    for day, (a, b) in enumerate(zip(plain, broken, strict=True)):
        ra, rb = (db.DBNStore.from_file(p).to_ndarray() for p in (a, b))
        before = ra["ts_event"].astype(np.int64) < cut
        assert np.array_equal(ra[before], rb[rb["ts_event"].astype(np.int64) < cut])
        assert day == 0 or not before.any()
        assert not np.array_equal(ra[~before], rb[rb["ts_event"].astype(np.int64) >= cut])
        after = read_sidecar(sidecar_path(b))
        assert after["generator"]["break_at"] == "2024-01-09"
        if day > 0:  # wholly after the break: the oracle has nothing to trade
            assert after["oracle_per_root"]["ES"].trades == 0
            assert read_sidecar(sidecar_path(a))["oracle_per_root"]["ES"].trades > 0
    assert "break_at" not in read_sidecar(sidecar_path(plain[0]))["generator"]
    ic = _momentum_ic(_front_closes(False, break_at=DAYS["start"]))  # broken from the start
    assert abs(ic) < 3 / np.sqrt(8 * 1380 / 5), ic


@pytest.fixture(scope="module")
def landed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("signal")
    kw = dict(days=6, roots=("ES", "ZN"), start=date(2024, 1, 8), seed=3)
    generate(root / "default", **kw)  # type: ignore[arg-type]
    generate(root / "walk", random_walk=True, **kw)  # type: ignore[arg-type]
    return {"default": root / "default", "walk": root / "walk"}


def test_each_file_has_a_sidecar_with_the_generator_parameters(landed: dict[str, Path]) -> None:
    files = sorted(landed["default"].glob("*.dbn.zst"))
    assert len(files) == 5  # Sat 2024-01-13 has no bars, no file
    for f in files:
        body = read_sidecar(sidecar_path(f))
        assert body["file"] == f.name and f.name.startswith(f"glbx-mdp3-{body['day'].replace('-', '')}")
        g = body["generator"]
        assert g["seed"] == 3 and g["schema"] == "ohlcv-1m" and not g["random_walk"]
        assert g["drift"]["sd_per_minute"] == DRIFT_SD and g["drift"]["half_life_s"] == DRIFT_HALF_LIFE_S
        assert set(body["oracle_per_root"]) == {"ES", "ZN"}
    walk = read_sidecar(sidecar_path(next(landed["walk"].glob("*.dbn.zst"))))["generator"]
    assert walk["random_walk"] and walk["ar1_rho"] == 0.0 and walk["drift"]["sd_per_minute"] == 0.0


def test_the_oracle_pays_after_costs_and_has_nothing_on_a_random_walk(
    landed: dict[str, Path],
) -> None:
    default, walk = oracle_summary(landed["default"]), oracle_summary(landed["walk"])
    assert default is not None and walk is not None
    es = default["per_root"]["ES"]
    assert es["trades"] > 50 and es["sharpe"] > 10 and es["ic"] > 0.2, es
    assert default["pooled"]["sharpe"] > 0 and default["pooled"]["total_cost"] > 0
    for stats in (*walk["per_root"].values(), walk["pooled"]):
        assert stats["trades"] == 0 and stats["sharpe"] is None and stats["ic"] is None
        assert stats["annual_log_return"] == 0.0


def test_oracle_summary_pools_the_days_asked_for(landed: dict[str, Path]) -> None:
    whole = oracle_summary(landed["default"])
    first = oracle_summary(landed["default"], end=date(2024, 1, 9), roots=["ES"])
    rest = oracle_summary(landed["default"], start=date(2024, 1, 10), roots=["ES"])
    assert whole and first and rest
    assert first["days"] == ["2024-01-08", "2024-01-09"] and list(first["per_root"]) == ["ES"]
    assert first["days"] + rest["days"] == whole["days"]
    bars = first["per_root"]["ES"]["n_bars"] + rest["per_root"]["ES"]["n_bars"]
    assert bars == whole["per_root"]["ES"]["n_bars"]
    assert oracle_summary(landed["default"], start=date(2025, 1, 1)) is None


def test_real_files_without_sidecars_have_no_oracle(tmp_path: Path) -> None:
    (f,) = generate(tmp_path, 1, roots=("ES",), seed=1)
    sidecar_path(f).unlink()
    assert oracle_summary(tmp_path) is None
    assert oracle_summary(tmp_path / "missing") is None


def test_a_different_sidecar_is_refused_and_left_alone(tmp_path: Path) -> None:
    (f,) = generate(tmp_path, 1, roots=("ES",), seed=1)
    side = sidecar_path(f)
    body = json.loads(side.read_text())
    body["generator"]["seed"] = 99
    side.write_text(json.dumps(body))
    before = side.read_bytes()
    with pytest.raises(LandedFileConflict, match=re.escape(side.name)):
        generate(tmp_path, 1, roots=("ES",), seed=1)
    assert side.read_bytes() == before


def test_a_broken_sidecar_is_named(tmp_path: Path) -> None:
    (f,) = generate(tmp_path, 1, roots=("ES",), seed=1)
    side = sidecar_path(f)
    side.write_text("{not json")
    with pytest.raises(ValueError, match=re.escape(side.name)):
        oracle_summary(tmp_path)
    side.write_text(json.dumps({"format_version": 1, "day": "2024-01-02", "generator": {},
                                "oracle_per_root": {"ES": {"n_bars": 3}}}))
    with pytest.raises(ValueError, match=r"ES: oracle statistics lack"):
        read_sidecar(side)


def test_mean_ticks_is_the_mean_of_the_tick_rounding() -> None:
    rng = np.random.default_rng(0)
    for x in (0.3, -0.7, 1.4, -2.5):
        draws = tick_moves(np.full(400_000, x), rng.random(400_000))
        assert abs(draws.mean() - mean_ticks(np.array([x]))[0]) < 0.01, x
    assert mean_ticks(np.array([0.5]))[0] == pytest.approx(0.25)  # sub-tick: sign(x) x**2


def test_the_oracle_enters_past_the_cost_and_leaves_when_the_sign_turns() -> None:
    expected = np.array([0.5, 1.5, 0.8, 0.1, -0.2, -1.2, -0.5, 0.3])
    pos = oracle_positions(expected, cost_ticks=1.0, position=0.0)
    assert pos.tolist() == [0, 1, 1, 1, 0, -1, -1, 0]
    # held over the next bar: +1 tick while long, -2 ticks round trip of cost
    moves = np.array([0, 0, 1, 1, 0, 0, -1, 0])
    day, last = oracle_day(expected, moves, np.full(8, 1000), 1.0, 0.0, horizon=2)
    assert last == 0.0 and day.trades == 2 and day.turnover == 4.0
    assert day.gross_sum == pytest.approx(2 * np.log(1.001) - np.log(0.999), rel=1e-9)
    assert (day + OracleDay()).to_json() == day.to_json()
