"""Continuous front-month series: volume rolls, no roll-back, expiry, session days,
and cross-file de-duplication."""

from __future__ import annotations

import shutil
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from foxhunt_pipeline.ingest.decode import RAW_BARS_POLARS_SCHEMA, ingest_dbn_file
from foxhunt_pipeline.instruments.rolls import build_continuous, contract_expiry, trade_date
from foxhunt_pipeline.storage.warehouse import raw_bars_partition_path, scan_raw_bars
from tests.dbn_fixtures import es_day_file

IDS = {"ESH4": 1, "ESM4": 2, "ESU4": 3, "ZNH4": 11, "ZNM4": 12}


def raw_frame(days: list[tuple[date, dict[str, int]]], bars_per_day: int = 3) -> pl.LazyFrame:
    """Bars at 09:00 CT (15:00 UTC in winter) on each day, one per minute, per symbol; the
    day's volume for a symbol is split evenly over its bars."""
    rows = []
    for d, vols in days:
        for sym, vol in vols.items():
            for k in range(bars_per_day):
                ts = datetime(d.year, d.month, d.day, 15, k, tzinfo=UTC)
                rows.append((ts, IDS[sym], sym, sym[:2], vol // bars_per_day, f"{d}.dbn"))
    df = pl.DataFrame(
        rows,
        schema=["ts_event", "instrument_id", "symbol", "root", "volume", "source_file"],
        orient="row",
    ).with_columns(
        pl.col("ts_event").cast(pl.Datetime("ns", "UTC")),
        pl.lit(33, pl.UInt8).alias("rtype"),
        pl.lit(1, pl.UInt16).alias("publisher_id"),
        pl.col("instrument_id").cast(pl.UInt32),
        pl.col("volume").cast(pl.UInt64),
        *(pl.lit(100.0).alias(c) for c in ("open", "high", "low", "close")),
    )
    return df.select(list(RAW_BARS_POLARS_SCHEMA)).lazy()


def weekdays(start: date, n: int) -> list[date]:
    out, d = [], start
    while len(out) < n:
        if d.weekday() < 5:
            out.append(d)
        d += timedelta(days=1)
    return out


def front_by_day(cont: pl.DataFrame) -> list[tuple[date, str, int]]:
    return (
        cont.with_columns(trade_date(pl.col("ts_event")).alias("day"))
        .select("day", "symbol", "contract_seq")
        .unique()
        .sort("day")
        .rows()
    )


def test_rolls_the_day_after_volume_crosses_and_never_back() -> None:
    d = weekdays(date(2024, 3, 4), 5)
    vols = [
        {"ESH4": 900, "ESM4": 90},
        {"ESH4": 900, "ESM4": 450},
        {"ESH4": 300, "ESM4": 600},  # ESM4 busier: roll at the start of the next session
        {"ESH4": 900, "ESM4": 150},  # ESH4 busier again: no roll back
        {"ESH4": 600, "ESM4": 300},
    ]
    cont, rolls = build_continuous(raw_frame(list(zip(d, vols, strict=True))))
    assert front_by_day(cont) == [
        (d[0], "ESH4", 0), (d[1], "ESH4", 0), (d[2], "ESH4", 0),
        (d[3], "ESM4", 1), (d[4], "ESM4", 1),
    ]  # fmt: skip
    assert rolls.rows() == [("ES", d[3], "ESH4", "ESM4", "volume")]
    expiry = dict(cont.select("symbol", "expiry").unique().rows())
    assert expiry == {"ESH4": date(2024, 3, 15), "ESM4": date(2024, 6, 21)}
    assert cont.columns[-2:] == ["contract_seq", "expiry"]
    assert cont.schema["contract_seq"] == pl.Int32 and cont.schema["expiry"] == pl.Date


def test_expired_contract_is_never_front() -> None:
    d = [date(2024, 3, 14), date(2024, 3, 15), date(2024, 3, 18), date(2024, 3, 19)]
    vols = [{"ESH4": 900, "ESM4": 100}] * 4  # volume never moves; ESH4 expires 2024-03-15
    cont, rolls = build_continuous(raw_frame(list(zip(d, vols, strict=True))))
    assert [s for _, s, _ in front_by_day(cont)] == ["ESH4", "ESH4", "ESM4", "ESM4"]
    assert rolls.rows() == [("ES", date(2024, 3, 18), "ESH4", "ESM4", "expiry")]
    past = cont.filter(pl.col("ts_event").dt.date() > pl.col("expiry"))
    assert past.height == 0


def test_first_front_is_nearest_expiry_without_lookahead() -> None:
    d = weekdays(date(2024, 3, 11), 2)
    cont, rolls = build_continuous(
        raw_frame([(d[0], {"ESH4": 10, "ESM4": 900}), (d[1], {"ESH4": 10, "ESM4": 900})])
    )
    assert [s for _, s, _ in front_by_day(cont)] == ["ESH4", "ESM4"]
    assert rolls["roll_date"].to_list() == [d[1]]


def test_roots_are_independent_and_sorted() -> None:
    d = weekdays(date(2024, 2, 26), 3)
    vols = [{"ESH4": 900, "ZNH4": 500, "ZNM4": 50}, {"ESH4": 900, "ZNH4": 100, "ZNM4": 700},
            {"ESH4": 900, "ZNH4": 100, "ZNM4": 700}]  # fmt: skip
    cont, rolls = build_continuous(raw_frame(list(zip(d, vols, strict=True))))
    assert rolls.select("root", "roll_date", "to_symbol").rows() == [("ZN", d[2], "ZNM4")]
    assert cont.equals(cont.sort("root", "ts_event"))
    assert cont.filter(pl.col("root") == "ES")["contract_seq"].unique().to_list() == [0]
    assert set(cont.filter(pl.col("root") == "ZN")["symbol"]) == {"ZNH4", "ZNM4"}


def test_session_day_is_cme_trade_date() -> None:
    ts = pl.Series(
        [
            datetime(2024, 1, 3, 22, 59, tzinfo=UTC),  # 16:59 CST -> Jan 3
            datetime(2024, 1, 3, 23, 0, tzinfo=UTC),  # 17:00 CST -> Jan 4
            datetime(2024, 7, 3, 22, 0, tzinfo=UTC),  # 17:00 CDT -> Jul 4
            datetime(2024, 7, 3, 21, 59, tzinfo=UTC),  # 16:59 CDT -> Jul 3
            datetime(2024, 1, 7, 23, 0, tzinfo=UTC),  # Sunday open -> Monday Jan 8
        ]
    ).cast(pl.Datetime("ns", "UTC"))
    out = pl.DataFrame({"ts": ts}).select(trade_date(pl.col("ts")))["ts"].to_list()
    assert out == [
        date(2024, 1, 3),
        date(2024, 1, 4),
        date(2024, 7, 4),
        date(2024, 7, 3),
        date(2024, 1, 8),
    ]


def test_evening_bars_count_toward_next_session() -> None:
    # ESM4 trades big at 17:30 CT on Mar 5 (23:30 UTC, still Mar 5 in UTC): that is
    # Mar 6's session, so the roll waits until Mar 7 (a UTC-date rule would roll Mar 6).
    base = raw_frame([(date(2024, 3, 5), {"ESH4": 900, "ESM4": 30}),
                      (date(2024, 3, 6), {"ESH4": 600, "ESM4": 30}),
                      (date(2024, 3, 7), {"ESH4": 600, "ESM4": 30})]).collect()  # fmt: skip
    evening = (
        base.filter(pl.col("symbol") == "ESM4")
        .head(1)
        .with_columns(
            pl.lit(datetime(2024, 3, 5, 23, 30, tzinfo=UTC))
            .cast(pl.Datetime("ns", "UTC"))
            .alias("ts_event"),
            pl.lit(5000, pl.UInt64).alias("volume"),
        )
    )
    cont, rolls = build_continuous(pl.concat([base, evening]).lazy())
    assert rolls["roll_date"].to_list() == [date(2024, 3, 7)]


def test_same_file_landed_twice_gives_no_duplicates(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    days = weekdays(date(2024, 1, 3), 2)
    for i, d in enumerate(days):
        src = es_day_file(tmp_path / "landing" / f"glbx-{i}.dbn.zst", d, n=10)
        ingest_dbn_file(src, raw_bars_partition_path(wh, src.name))
    single, single_rolls = build_continuous(scan_raw_bars(wh))
    copy = tmp_path / "landing" / "copy of glbx-0 (1).dbn.zst"
    shutil.copy(tmp_path / "landing" / "glbx-0.dbn.zst", copy)
    ingest_dbn_file(copy, raw_bars_partition_path(wh, copy.name))
    assert scan_raw_bars(wh).select(pl.len()).collect().item() == 60
    twice, twice_rolls = build_continuous(scan_raw_bars(wh))
    assert twice.equals(single) and twice_rolls.equals(single_rolls)
    assert twice.select("instrument_id", "ts_event", "publisher_id").is_duplicated().sum() == 0
    assert twice.height == 20 and set(twice["symbol"]) == {"ESH4"}


def test_empty_input() -> None:
    cont, rolls = build_continuous(pl.LazyFrame(schema=RAW_BARS_POLARS_SCHEMA))
    assert cont.height == 0 and rolls.height == 0
    assert cont.columns[-2:] == ["contract_seq", "expiry"] and "source_file" not in cont.columns
    assert rolls.columns == ["root", "roll_date", "from_symbol", "to_symbol", "rule"]


def test_contract_expiry_resolves_decade_and_rejects_spreads() -> None:
    assert contract_expiry("ES", "ESH4", date(2024, 1, 2)) == date(2024, 3, 15)
    assert contract_expiry("ES", "ESH1", date(2020, 12, 28)) == date(2021, 3, 19)
    with pytest.raises(ValueError, match="not an outright"):
        contract_expiry("ES", "ESH4-ESM4", date(2024, 1, 2))
