"""The synthetic generator lands files a Databento batch download would, with the market
properties the rest of the pipeline relies on. Session checks recompute Chicago time per
record with zoneinfo rather than reusing the generator's own calendar code."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import databento as db
import databento_dbn as dbn
import numpy as np
import pytest

from foxhunt_pipeline.instruments.specs import ROOTS, is_spread
from foxhunt_pipeline.synthetic.generate import (
    OHLCV_DTYPE,
    LandedFileConflict,
    Mapping,
    generate,
    generate_file,
    generate_large_file,
    ohlcv_records,
)

CT = ZoneInfo("America/Chicago")
NAME = re.compile(r"^glbx-mdp3-(\d{8})\.ohlcv-1[ms]\.dbn\.zst$")


def _read(path: Path) -> tuple[db.DBNStore, np.ndarray, dict[int, str]]:
    store = db.DBNStore.from_file(path)
    recs = store.to_ndarray()
    symbols = {
        int(iv["symbol"]): raw for raw, ivs in store.mappings.items() for iv in ivs if iv["symbol"]
    }
    return store, recs, symbols


def _ct(ts_ns: int) -> datetime:
    return datetime.fromtimestamp(ts_ns / 1e9, tz=UTC).astimezone(CT)


def _volume_by_symbol(path: Path) -> dict[str, int]:
    _, recs, symbols = _read(path)
    out: dict[str, int] = {}
    for iid, vol in zip(recs["instrument_id"], recs["volume"], strict=True):
        out[symbols[int(iid)]] = out.get(symbols[int(iid)], 0) + int(vol)
    return out


@pytest.fixture(scope="module")
def week_1m(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Fri 2024-01-05 .. Mon 2024-01-08: a weekend and daily halts, CST."""
    return generate(tmp_path_factory.mktemp("week"), 4, start=date(2024, 1, 5))


@pytest.fixture(scope="module")
def roll_1m(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """2024-03-04 .. 03-17: ES rolls (centre Mar 7), ESH4 expires Fri Mar 15 08:30 CT, DST Mar 10."""
    return generate(tmp_path_factory.mktemp("roll"), 14, start=date(2024, 3, 4))


def test_files_are_laid_out_like_a_batch_download(week_1m: list[Path]) -> None:
    names = [p.name for p in week_1m]
    assert names == [
        "glbx-mdp3-20240105.ohlcv-1m.dbn.zst",
        "glbx-mdp3-20240107.ohlcv-1m.dbn.zst",  # Saturday: no bars, no file
        "glbx-mdp3-20240108.ohlcv-1m.dbn.zst",
    ]
    ids_by_symbol: dict[str, int] = {}
    for path in week_1m:
        store, recs, symbols = _read(path)
        day = datetime.strptime(NAME.match(path.name)[1], "%Y%m%d").replace(tzinfo=UTC)  # type: ignore[index]
        assert store.metadata.version == 3
        assert store.dataset == "GLBX.MDP3"
        assert store.schema == "ohlcv-1m"
        assert str(store.stype_in) == "parent" and str(store.stype_out) == "instrument_id"
        assert store.symbols == ["ES.FUT", "ZN.FUT"]
        assert store.start == day and (store.end - store.start).days == 1
        assert {"ESH4", "ESM4", "ESH4-ESM4", "ZNH4", "ZNM4", "ZNH4-ZNM4"} <= set(store.mappings)
        assert len(recs) > 0 and set(np.unique(recs["rtype"])) == {int(dbn.RType.OHLCV_1M)}
        assert set(np.unique(recs["publisher_id"])) == {1}
        assert np.all(np.diff(recs["ts_event"].astype(np.int64)) >= 0)
        assert np.all(recs["ts_event"] >= store.metadata.start)
        assert np.all(recs["ts_event"] < store.metadata.end)
        df = store.to_df(map_symbols=True)
        assert df["symbol"].notna().all() and set(df["symbol"]) <= set(store.mappings)
        for iid, sym in symbols.items():
            assert ids_by_symbol.setdefault(sym, iid) == iid, f"{sym} changed instrument_id"


def test_bars_only_while_globex_trades(week_1m: list[Path], roll_1m: list[Path]) -> None:
    sunday_opens = []
    for path in week_1m + roll_1m:
        _, recs, _ = _read(path)
        for ts in np.unique(recs["ts_event"]).tolist():
            t = _ct(ts)
            minute = t.hour * 60 + t.minute
            wd = t.weekday()
            assert not (16 * 60 <= minute < 17 * 60), f"{path.name}: bar in the daily halt at {t}"
            assert wd != 5, f"{path.name}: bar on Saturday {t}"
            assert not (wd == 4 and minute >= 16 * 60), f"{path.name}: bar after Friday close {t}"
            assert not (wd == 6 and minute < 17 * 60), f"{path.name}: bar before Sunday open {t}"
            if wd == 6 and minute == 17 * 60:
                sunday_opens.append(datetime.fromtimestamp(ts / 1e9, tz=UTC))
    # the Sunday reopen is 17:00 CT on both sides of the DST switch (CST -> CDT on Mar 10)
    assert sorted({(t.date(), t.hour) for t in sunday_opens}) == [
        (date(2024, 1, 7), 23),
        (date(2024, 3, 10), 22),
        (date(2024, 3, 17), 22),
    ]


def test_bars_are_consistent_and_on_the_tick_grid(week_1m: list[Path], roll_1m: list[Path]) -> None:
    for path in week_1m + roll_1m:
        _, recs, symbols = _read(path)
        o, h, lo, c = (recs[f].astype(np.int64) for f in ("open", "high", "low", "close"))
        assert np.all(lo <= np.minimum(o, c)) and np.all(np.maximum(o, c) <= h), path.name
        assert np.all(recs["volume"] > 0), path.name
        for iid in np.unique(recs["instrument_id"]):
            sym = symbols[int(iid)]
            sel = recs["instrument_id"] == iid
            tick = round(ROOTS[sym[:2]].tick_size * 1e9)
            for col in (o, h, lo, c):
                assert np.all(col[sel] % tick == 0), f"{path.name} {sym}: price off the tick grid"
            if not is_spread(sym):
                assert np.all(lo[sel] > 0), f"{path.name} {sym}: non-positive price"
    # ES calendar spreads trade at a negative price (contango), encoded as negative fixed point
    _, recs, symbols = _read(week_1m[0])
    spread_ids = [i for i, s in symbols.items() if s == "ESH4-ESM4"]
    assert np.all(recs["close"][np.isin(recs["instrument_id"], spread_ids)] < 0)


def test_volume_rolls_to_the_next_contract_and_the_expired_one_stops(roll_1m: list[Path]) -> None:
    by_day = {NAME.match(p.name)[1]: p for p in roll_1m}  # type: ignore[index]
    before, after = _volume_by_symbol(by_day["20240304"]), _volume_by_symbol(by_day["20240312"])
    assert before["ESH4"] > 10 * before["ESM4"]
    assert after["ESM4"] > 10 * after["ESH4"]
    # calendar-spread trading peaks around the roll
    roll_day, late = _volume_by_symbol(by_day["20240307"]), _volume_by_symbol(by_day["20240314"])
    assert roll_day["ESH4-ESM4"] > 3 * late["ESH4-ESM4"]
    # treasuries rolled at the end of February: ZNM4 already dominates
    assert before["ZNM4"] > 10 * before["ZNH4"]

    expiry = int(datetime(2024, 3, 15, 8, 30, tzinfo=CT).timestamp() * 1e9)
    store, recs, symbols = _read(by_day["20240315"])
    esh4 = [i for i, s in symbols.items() if s == "ESH4"]
    es_bars = recs[np.isin(recs["instrument_id"], esh4)]
    assert es_bars.size > 0 and int(es_bars["ts_event"].max()) < expiry
    assert "ESU4" in store.mappings and "ESM4-ESU4" in store.mappings
    for name in ("20240317",):
        store, _, _ = _read(by_day[name])
        assert "ESH4" not in store.mappings and "ESH4-ESM4" not in store.mappings
        assert {"ESM4", "ESU4", "ESM4-ESU4"} <= set(store.mappings)


def test_spread_prices_are_front_minus_back(roll_1m: list[Path]) -> None:
    _, recs, symbols = _read(roll_1m[0])
    ids = {s: i for i, s in symbols.items()}
    close = {
        s: dict(
            zip(
                recs["ts_event"][recs["instrument_id"] == ids[s]].tolist(),
                recs["close"][recs["instrument_id"] == ids[s]].tolist(),
                strict=True,
            )
        )
        for s in ("ESH4", "ESM4", "ESH4-ESM4")
    }
    common = close["ESH4"].keys() & close["ESM4"].keys() & close["ESH4-ESM4"].keys()
    assert len(common) > 100
    for t in common:
        assert close["ESH4-ESM4"][t] == close["ESH4"][t] - close["ESM4"][t]
    basis = [close["ESM4"][t] - close["ESH4"][t] for t in common]
    assert min(basis) > 0 and max(basis) < 0.02 * 4800e9  # deferred at a small premium


def test_intraday_seasonality_clustering_and_omitted_minutes(week_1m: list[Path]) -> None:
    vols: dict[str, list[int]] = {"open": [], "midday": [], "night": []}
    present = {"rth": 0, "night": 0}
    rets = []
    for path in week_1m:  # January: ESH4 is the front, far from its roll
        _, recs, symbols = _read(path)
        ids = {s: i for i, s in symbols.items()}
        front = recs[recs["instrument_id"] == ids["ESH4"]]
        spread = recs[recs["instrument_id"] == ids["ESH4-ESM4"]]
        for ts, vol in zip(front["ts_event"].tolist(), front["volume"].tolist(), strict=True):
            t = _ct(ts)
            m = t.hour * 60 + t.minute
            if 8 * 60 + 30 <= m < 9 * 60:
                vols["open"].append(vol)
            elif 11 * 60 <= m < 13 * 60:
                vols["midday"].append(vol)
            elif m >= 19 * 60 or m < 1 * 60:
                vols["night"].append(vol)
        for ts in spread["ts_event"].tolist():
            t = _ct(ts)
            m = t.hour * 60 + t.minute
            present["rth" if 8 * 60 + 30 <= m < 15 * 60 else "night"] += 1
        c = front["close"].astype(np.float64)
        rets.append(np.diff(c))
    mean = {k: np.mean(v) for k, v in vols.items()}
    assert mean["open"] > 1.5 * mean["midday"] > 1.5 * mean["night"]
    # spreads: a larger share of RTH minutes trade (390 per day) than overnight ones (990)
    assert present["rth"] / 390 > 1.5 * present["night"] / 990
    r = np.concatenate(rets)
    a = np.abs(r)
    assert np.corrcoef(a[1:], a[:-1])[0, 1] > 0.1  # volatility clustering
    kurt = np.mean((r - r.mean()) ** 4) / np.var(r) ** 2
    assert kurt > 4  # fat tails


def test_deterministic_by_seed_and_prefix_stable(tmp_path: Path) -> None:
    a = generate(tmp_path / "a", 2, roots=("ES",), seed=11)
    b = generate(tmp_path / "b", 2, roots=("ES",), seed=11)
    c = generate(tmp_path / "c", 2, roots=("ES",), seed=12)
    one = generate(tmp_path / "one", 1, roots=("ES",), seed=11, progress=True)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert a[0].read_bytes() != c[0].read_bytes()
    assert one[0].read_bytes() == a[0].read_bytes()  # a longer run extends a shorter one


def _lag1_stats(path: Path) -> tuple[float, float, int, float]:
    """Lag-1 statistics of consecutive 1-second close-to-close returns of each root's most
    traded outright (the deferred month moves with the front, so it would count twice):
    Pearson autocorrelation, mean product of signs over pairs of non-zero moves (exactly a
    fair-coin average under a random walk, so its noise band is 1/sqrt(pairs)), the number
    of such pairs, and the return standard deviation in ticks."""
    _, recs, symbols = _read(path)
    volume: dict[str, tuple[int, int]] = {}
    for iid, sym in symbols.items():
        v = int(recs["volume"][recs["instrument_id"] == iid].sum())
        if not is_spread(sym) and v > volume.get(sym[:2], (0, 0))[0]:
            volume[sym[:2]] = (v, iid)
    xs, ys, rets = [], [], []
    for _, iid in volume.values():
        r = recs[recs["instrument_id"] == iid]
        ret = np.diff(r["close"].astype(np.float64)) / round(
            ROOTS[symbols[iid][:2]].tick_size * 1e9
        )
        step = np.diff(r["ts_event"].astype(np.int64)) == 1_000_000_000
        ok = step[1:] & step[:-1]
        xs.append(ret[:-1][ok])
        ys.append(ret[1:][ok])
        rets.append(ret[step])
    x, y = np.concatenate(xs), np.concatenate(ys)
    nz = (x != 0) & (y != 0)
    sign = float(np.mean(np.sign(x[nz]) * np.sign(y[nz])))
    return float(np.corrcoef(x, y)[0, 1]), sign, int(nz.sum()), float(np.std(np.concatenate(rets)))


def test_random_walk_removes_the_documented_autocorrelation(tmp_path: Path) -> None:
    kw = dict(days=1, schema="ohlcv-1s", start=date(2024, 1, 2), seed=3)
    (default,) = generate(tmp_path / "default", **kw)  # type: ignore[arg-type]
    (walk,) = generate(tmp_path / "walk", random_walk=True, **kw)  # type: ignore[arg-type]
    ac_default, sign_default, n_default, sd_default = _lag1_stats(default)
    ac_walk, sign_walk, n_walk, sd_walk = _lag1_stats(walk)
    assert n_default > 1000 and n_walk > 1000
    assert ac_default > 0.04  # documented: AR(1) with rho = 0.1 at the bar size
    assert sign_default > 4 / np.sqrt(n_default)
    assert abs(sign_walk) < 4 / np.sqrt(n_walk)  # nothing beyond noise
    assert 0.8 < sd_walk / sd_default < 1.25  # same volatility process


def test_vectorised_records_match_dbn_bytes() -> None:
    assert OHLCV_DTYPE.itemsize == dbn.OHLCVMsg.size_hint
    rows = [
        (
            33,
            1,
            100291,
            1704153600000000000,
            4800_250_000_000,
            4801_000_000_000,
            4799_750_000_000,
            4800_500_000_000,
            12,
        ),
        (
            33,
            1,
            105291,
            1704153660000000000,
            -55_250_000_000,
            -55_000_000_000,
            -55_500_000_000,
            -55_250_000_000,
            1,
        ),
        (32, 2, 4294967295, 2**63 + 5, dbn.UNDEF_PRICE, dbn.UNDEF_PRICE, -(2**63), 0, 2**64 - 1),
    ]
    for rtype, pub, iid, ts, o, h, lo, c, v in rows:
        schema = "ohlcv-1m" if rtype == 33 else "ohlcv-1s"
        mine = ohlcv_records(iid, ts, o, h, lo, c, v, schema=schema, publisher_id=pub).tobytes()
        ref = dbn.OHLCVMsg(rtype, pub, iid, ts, o, h, lo, c, v)
        assert mine == bytes(ref)
    # and the whole array at once, as the writer uses it
    cols = list(zip(*rows, strict=True))
    batch = ohlcv_records(cols[2][:2], cols[3][:2], *(np.array(c[:2]) for c in cols[4:]))
    assert batch.tobytes() == b"".join(bytes(dbn.OHLCVMsg(33, 1, *r[2:])) for r in rows[:2])


def test_a_landed_file_is_never_overwritten(tmp_path: Path) -> None:
    (path,) = generate(tmp_path, 1, roots=("ES",), seed=1)
    before, mtime = path.read_bytes(), path.stat().st_mtime_ns
    assert generate(tmp_path, 1, roots=("ES",), seed=1) == [path]  # identical: a no-op
    with pytest.raises(LandedFileConflict, match=re.escape(path.name)):
        generate(tmp_path, 1, roots=("ES",), seed=2)
    assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime
    # no temp files left; the sidecar describes the file that stayed
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, path.name + ".generator.json"]


def test_generate_file_writes_bad_records_verbatim(tmp_path: Path) -> None:
    t0 = 1704153600000000000
    p = int(4800e9)
    recs = ohlcv_records(
        [7, 7, 7, 8],
        [t0, t0, t0 + 60_000_000_000, t0],
        [p, p, p, dbn.UNDEF_PRICE],
        [p - 1_000_000_000, p - 1_000_000_000, p, dbn.UNDEF_PRICE],  # crossed: high < open
        [p, p, p, dbn.UNDEF_PRICE],
        [p, p, p, dbn.UNDEF_PRICE],
        [1, 1, 0, 5],
    )
    maps = [
        Mapping("ESH4", 7, date(2024, 1, 2), date(2024, 1, 3)),
        Mapping("ESH4-ESM4", 8, date(2024, 1, 2), date(2024, 1, 3)),
    ]
    path = generate_file(
        tmp_path / "bad file ü.dbn.zst",
        recs,
        schema="ohlcv-1m",
        start=t0,
        end=t0 + 86_400_000_000_000,
        symbols=["ES.FUT"],
        mappings=maps,
    )
    store = db.DBNStore.from_file(path)
    back = store.to_ndarray()
    assert back.tobytes() == recs.tobytes()  # duplicates, crossed bar, zero volume kept
    assert store.to_df(map_symbols=True)["symbol"].tolist() == ["ESH4", "ESH4", "ESH4", "ESH4-ESM4"]

    empty = generate_file(
        tmp_path / "empty.dbn.zst",
        np.empty(0, OHLCV_DTYPE),
        schema="ohlcv-1m",
        start=t0,
        end=t0 + 1,
        symbols=["ES.FUT"],
        version=2,
    )
    store = db.DBNStore.from_file(empty)
    assert store.metadata.version == 2 and len(store.to_ndarray()) == 0

    trade = dbn.TradeMsg(1, 7, t0, p, 3, dbn.Action.TRADE, dbn.Side.BID, 0, t0)
    trades = generate_file(
        tmp_path / "trades.dbn",
        [trade],
        schema="trades",
        start=t0,
        end=t0 + 1,
        symbols=["ESH4"],
        stype_in="raw_symbol",
    )
    store = db.DBNStore.from_file(trades)
    assert store.schema == "trades" and store.to_ndarray()["price"].tolist() == [p]


def test_large_benchmark_file(tmp_path: Path) -> None:
    path = generate_large_file(tmp_path / "big.ohlcv-1s.dbn.zst", 30_001, n_instruments=2)
    store, recs, symbols = _read(path)
    assert len(recs) == 30_001 and store.schema == "ohlcv-1s"
    assert sorted(symbols.values()) == ["ESH4", "ZNH4"]
    ts = recs["ts_event"].astype(np.int64)
    assert (
        np.all(np.diff(ts) >= 0) and store.metadata.start <= ts[0] and ts[-1] < store.metadata.end
    )
    o, h, lo, c = (recs[f].astype(np.int64) for f in ("open", "high", "low", "close"))
    assert np.all(lo <= np.minimum(o, c)) and np.all(np.maximum(o, c) <= h)
    assert np.all(recs["volume"] > 0) and np.all(lo > 0)


def test_fall_dst_switch_moves_the_utc_session(tmp_path: Path) -> None:
    """CDT -> CST on Sun 2024-11-03: Friday closes 21:00 UTC, Sunday reopens 23:00 UTC."""
    fri, sun = generate(tmp_path, 3, roots=("ES",), start=date(2024, 11, 1))
    last_fri = int(_read(fri)[1]["ts_event"].max())
    first_sun = int(_read(sun)[1]["ts_event"].min())
    assert datetime.fromtimestamp(last_fri / 1e9, tz=UTC) == datetime(
        2024, 11, 1, 20, 59, tzinfo=UTC
    )
    assert datetime.fromtimestamp(first_sun / 1e9, tz=UTC) == datetime(
        2024, 11, 3, 23, 0, tzinfo=UTC
    )


def test_bad_arguments_are_named(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="XX"):
        generate(tmp_path, 1, roots=("XX",))
    with pytest.raises(ValueError, match="ohlcv-1h"):
        generate(tmp_path, 1, schema="ohlcv-1h")
    assert generate(tmp_path, 0) == []


def test_full_exchange_holidays_close_the_session_per_root_calendar():
    """Regression: the generator once traded through holidays that the known-future inputs
    (same pandas_market_calendars calendars) flag as closed."""
    from foxhunt_pipeline.synthetic.generate import iter_days
    from foxhunt_pipeline.synthetic.session import trade_days

    def trade_dates_by_root(start, days):
        out: dict[int, set] = {}
        for _, recs, _ in iter_days(days, roots=("ES", "ZN"), start=start):
            for iid, td in zip(recs["instrument_id"], trade_days(recs["ts_event"]), strict=True):
                out.setdefault(int(iid) // 10_000 % 10, set()).add(str(np.datetime64(int(td), "D")))
        return out

    new_year = trade_dates_by_root(date(2023, 12, 31), 3)
    assert all("2024-01-01" not in dates for dates in new_year.values())
    assert all("2024-01-02" in dates for dates in new_year.values())
    good_friday = trade_dates_by_root(date(2024, 3, 28), 2)  # CME_Bond closed, CME_Equity open
    es, zn = ROOTS["ES"].root_id, ROOTS["ZN"].root_id
    assert "2024-03-29" in good_friday[es]
    assert "2024-03-29" not in good_friday[zn]
