"""ingest_dbn_file against a plain reference decode written here: every row, value, null,
dtype and the row order must match, and inline validation must agree with pandera on the
written file. Files cover spreads, duplicates, out-of-order rows, gaps, UNDEF prices,
unmapped days, a second publisher, a roll between contracts, many chunks and spilling."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import databento as db
import numpy as np
import polars as pl
import pytest

from foxhunt_pipeline.contracts.schemas import raw_bars_schema, validate_frame
from foxhunt_pipeline.ingest.decode import RAW_BARS_POLARS_SCHEMA, UNDEF_PRICE, ingest_dbn_file
from foxhunt_pipeline.instruments.specs import is_spread, parse_outright
from foxhunt_pipeline.synthetic.generate import generate_large_file
from tests.dbn_fixtures import (
    NS,
    SAMPLE_DBN,
    Instrument,
    day_ns,
    encode_dbn,
    es_day_file,
    make_records,
    write_dbn,
)

DAY_NS = 86_400 * NS


def reference_decode(src: Path) -> pl.DataFrame:
    """The contract spelled out: whole file via DBNStore, outrights on mapped days only,
    first record of each (instrument, ts_event, publisher) key, sorted by that key."""
    store = db.DBNStore.from_file(src)
    meta = store.metadata
    recs = store.to_ndarray()
    if recs.dtype.names is None or len(recs) == 0:
        recs = np.zeros(0, dtype=store.to_ndarray().dtype)
    symbol_of: dict[tuple[int, int], str] = {}
    epoch = date(1970, 1, 1)
    for raw, intervals in meta.mappings.items():
        for iv in intervals:
            if not iv["symbol"]:
                continue
            for d in range((iv["start_date"] - epoch).days, (iv["end_date"] - epoch).days):
                symbol_of[(int(iv["symbol"]), d)] = raw
    roots = {s.split(".")[0] for s in meta.symbols if s.endswith(".FUT")}
    parent_root = roots.pop() if len(roots) == 1 else None

    days = (recs["ts_event"] // np.uint64(DAY_NS)).astype(np.int64)
    syms = [
        symbol_of.get((int(i), int(d))) for i, d in zip(recs["instrument_id"], days, strict=True)
    ]
    keep = np.array([s is not None and not is_spread(s) for s in syms], dtype=bool)
    order = np.lexsort((recs["publisher_id"], recs["ts_event"], recs["instrument_id"]))
    order = order[keep[order]]
    recs, syms_sorted, days = recs[order], [syms[i] for i in order], days[order]
    if len(recs) > 1:
        key = ("instrument_id", "ts_event", "publisher_id")
        same = np.logical_and.reduce([recs[k][1:] == recs[k][:-1] for k in key])
        first = np.r_[True, ~same]
        recs, days = recs[first], days[first]
        syms_sorted = [s for s, f in zip(syms_sorted, first, strict=True) if f]

    def root(symbol: str, day: int) -> str | None:
        parsed = parse_outright(symbol, epoch + timedelta(days=int(day)))
        return parsed[0] if parsed else parent_root

    prices = {
        c: pl.Series(c, recs[c].astype(np.int64) / 1e9).set(pl.Series(recs[c] == UNDEF_PRICE), None)
        for c in ("open", "high", "low", "close")
    }
    out = pl.DataFrame(
        {
            "ts_event": pl.Series(recs["ts_event"].astype(np.int64)).cast(pl.Datetime("ns", "UTC")),
            "rtype": recs["rtype"],
            "publisher_id": recs["publisher_id"],
            "instrument_id": recs["instrument_id"],
            "symbol": pl.Series(syms_sorted, dtype=pl.String),
            "root": pl.Series(
                [root(s, d) for s, d in zip(syms_sorted, days, strict=True)], dtype=pl.String
            ),
            **prices,
            "volume": recs["volume"],
            "source_file": pl.Series([src.name] * len(recs), dtype=pl.String),
        }
    )
    return out.cast(RAW_BARS_POLARS_SCHEMA)  # type: ignore[arg-type]


def messy_file(path: Path) -> Path:
    """Two outrights, a spread and an unmapped instrument over three days with a roll
    (ESH4 mapped to Jan 4, ESM4 from Jan 4), out-of-order rows, exact duplicates, a
    second publisher on the same timestamps, gaps, UNDEF prices and a crossed bar."""
    d0 = day_ns(date(2024, 1, 3))
    step = 3600 * NS
    front = make_records(100, d0, 60, schema="ohlcv-1h")  # Jan 3 .. Jan 5
    front = front[np.r_[0:20, 25:60]]  # a gap
    front["high"][7] = UNDEF_PRICE
    front["close"][30] = UNDEF_PRICE
    front["high"][12] = front["low"][12] - NS  # crossed
    back = make_records(200, d0 + 5 * step, 50, schema="ohlcv-1h", price=4850.0)
    back_pub2 = make_records(200, d0 + 30 * step, 10, schema="ohlcv-1h", publisher_id=2)
    spread = make_records(300, d0, 40, schema="ohlcv-1h", price=-50.0)
    unmapped = make_records(400, d0, 10, schema="ohlcv-1h")
    body = np.concatenate([front, back, back_pub2, spread, unmapped])
    body = body[np.argsort(body["ts_event"], kind="stable")]
    body = np.concatenate([body[40:], body[:45], body[10:12]])  # out of order + duplicates
    raw = encode_dbn(
        body,
        start_ns=d0,
        end_ns=d0 + 3 * DAY_NS,
        schema="ohlcv-1h",
        instruments=[
            Instrument(100, "ESH4", date(2024, 1, 1), date(2024, 1, 4)),
            Instrument(200, "ESM4", date(2024, 1, 4), date(2024, 6, 22)),
            Instrument(300, "ESH4-ESM4", date(2024, 1, 1), date(2024, 3, 16)),
        ],
    )
    return write_dbn(path, raw)


def assert_same(ours: Path, ref: pl.DataFrame) -> None:
    got = pl.read_parquet(ours)
    assert got.schema == ref.schema
    assert got.height == ref.height
    for name in ref.columns:  # column by column, so a failure names the column
        assert got[name].equals(ref[name], check_names=True), name


CASES = {
    "es_day_spreads": lambda p: es_day_file(p / "es.ohlcv-1m.dbn.zst", date(2024, 1, 3), n=200),
    "messy": lambda p: messy_file(p / "messy.ohlcv-1h.dbn.zst"),
    "large_two_outrights": lambda p: generate_large_file(
        p / "large.ohlcv-1s.dbn.zst", 30_000, schema="ohlcv-1s", n_instruments=2, seed=3
    ),
    "large_twelve_outrights": lambda p: generate_large_file(
        p / "large12.ohlcv-1m.dbn.zst", 20_000, schema="ohlcv-1m", n_instruments=12, seed=5
    ),
}
# (chunk_records, row_group_rows, spill_memory_bytes): defaults, tiny chunks, all spilled
SETTINGS = [(None, None, None), (997, 1_500, None), (4_096, 3_000, 0)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_output_matches_reference_decode(case: str, tmp_path: Path) -> None:
    src = CASES[case](tmp_path)
    ref = reference_decode(src)
    assert ref.height > 0
    for i, (chunk, rg, spill) in enumerate(SETTINGS):
        opts = {
            k: v
            for k, v in (
                ("chunk_records", chunk),
                ("row_group_rows", rg),
                ("spill_memory_bytes", spill),
            )
            if v is not None
        }
        dest = tmp_path / f"out{i}.parquet"
        report = ingest_dbn_file(src, dest, validate=True, **opts)
        assert_same(dest, ref)
        assert report.rows_out == ref.height
        whole = validate_frame(
            pl.read_parquet(dest), raw_bars_schema(report.start_ns, report.end_ns)
        )
        assert report.validation is not None
        assert report.validation.passed == whole.passed
        assert report.validation.n_failed_rows == whole.n_failed_rows
        assert sorted(set(report.validation.failures["row"].drop_nulls())) == sorted(
            set(whole.failures["row"].drop_nulls())
        )


def test_messy_file_exercises_every_path(tmp_path: Path) -> None:
    """The messy fixture really holds what it claims (so the equivalence above means it)."""
    src = messy_file(tmp_path / "messy.ohlcv-1h.dbn.zst")
    r = ingest_dbn_file(src, tmp_path / "o.parquet", validate=True, chunk_records=50)
    assert r.spreads_dropped > 0 and r.unmapped_dropped > 0 and r.duplicates_dropped > 0
    assert r.undef_price_rows >= 1
    assert r.validation is not None and not r.validation.passed
    out = pl.read_parquet(tmp_path / "o.parquet")
    assert set(out["symbol"]) == {"ESH4", "ESM4"} and set(out["publisher_id"]) == {1, 2}


@pytest.mark.parametrize(
    "name",
    ["test_data.ohlcv-1s.v3.dbn.zst", "test_data.ohlcv-1m.v1.dbn.zst", "test_data.ohlcv-1h.dbn"],
)
def test_real_files_match_reference_decode(name: str, tmp_path: Path) -> None:
    src = SAMPLE_DBN / name
    ingest_dbn_file(src, tmp_path / "o.parquet", validate=True)
    assert_same(tmp_path / "o.parquet", reference_decode(src))


def test_reference_comparison_can_fail(tmp_path: Path) -> None:
    """A one-ulp change to one price is caught."""
    src = es_day_file(tmp_path / "es.ohlcv-1m.dbn.zst", date(2024, 1, 3), n=20)
    ingest_dbn_file(src, tmp_path / "o.parquet")
    ref = reference_decode(src)
    bumped = ref.with_columns(
        pl.when(pl.int_range(pl.len()) == 3)
        .then(pl.col("close") + pl.col("close").abs() * 2.3e-16)
        .otherwise(pl.col("close"))
        .alias("close")
    )
    assert not bumped["close"].equals(ref["close"])
    with pytest.raises(AssertionError, match="close"):
        assert_same(tmp_path / "o.parquet", bumped)


def _screened(recs: np.ndarray, start_ns: int, end_ns: int) -> bool:
    from foxhunt_pipeline.ingest.batches import BatchScreen, raw_bars_batch

    screen = BatchScreen.for_schema(raw_bars_schema(start_ns, end_ns), start_ns, end_ns)
    assert screen is not None
    raw_bars_batch(recs, "ESH4", "ES", "f.dbn", screen)
    return screen.passed


@pytest.mark.parametrize(
    "perturb",
    ["none", "before_start", "at_end", "step_back", "repeat_ts", "low_zero", "crossed", "undef"],
)
def test_numpy_batch_screen_only_passes_what_pandera_passes(perturb: str) -> None:
    from foxhunt_pipeline.ingest.batches import raw_bars_batch, validation_view

    d0 = day_ns(date(2024, 1, 3))
    recs = make_records(100, d0 + NS, 50, schema="ohlcv-1s")
    start, end = d0, d0 + DAY_NS
    if perturb == "before_start":
        start = d0 + 2 * NS
    elif perturb == "at_end":
        end = int(recs["ts_event"][-1])
    elif perturb == "step_back":
        recs["ts_event"][20] = recs["ts_event"][18]
    elif perturb == "repeat_ts":
        recs["ts_event"][20] = recs["ts_event"][19]
    elif perturb == "low_zero":
        recs["low"][9] = 0
    elif perturb == "crossed":
        recs["open"][9] = recs["high"][9] + 1
    elif perturb == "undef":
        recs["close"][3] = UNDEF_PRICE
    frame, consts = validation_view(raw_bars_batch(recs, "ESH4", "ES", "f.dbn")[0])
    frame = frame.with_columns(pl.lit(v, pl.String).alias(k) for k, v in consts.items())
    pandera_ok = validate_frame(
        frame.select(list(RAW_BARS_POLARS_SCHEMA)), raw_bars_schema(start, end)
    )
    assert _screened(recs, start, end) == pandera_ok.passed == (perturb == "none")


def test_screened_batch_that_steps_back_goes_to_pandera() -> None:
    from foxhunt_pipeline.contracts.schemas import StreamValidator

    v = StreamValidator(raw_bars_schema(None, None))

    def row() -> pl.DataFrame:
        raise AssertionError("built only when needed")

    assert v.feed_passed(10, (100, 5), (100, 50), row)
    assert not v.feed_passed(10, (100, 50), (100, 90), row)  # same key as the last row
    assert not v.feed_passed(10, (99, 60), (99, 90), row)  # instrument steps back
    assert v.feed_passed(10, (101, 1), (101, 9), row) and v.height == 20
