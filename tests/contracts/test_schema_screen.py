"""The vectorised screen in front of pandera: it may only ever wave through frames that
pandera passes, and the streaming validator's one-value string columns give the same
report as the materialised columns."""

from __future__ import annotations

from datetime import date

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pandera.errors import SchemaError, SchemaErrors

from foxhunt_pipeline.contracts.schemas import (
    StreamValidator,
    continuous_bars_schema,
    raw_bars_schema,
    screen_passes,
)
from foxhunt_pipeline.ingest.decode import ingest_dbn_file
from foxhunt_pipeline.instruments.rolls import build_continuous
from tests.dbn_fixtures import NS, day_ns, es_day_file

DAY = date(2024, 1, 3)
START, END = day_ns(DAY), day_ns(DAY) + 86400 * NS
STRINGS = ("symbol", "root", "source_file")


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> pl.DataFrame:
    d = tmp_path_factory.mktemp("raw")
    ingest_dbn_file(es_day_file(d / "f.dbn.zst", DAY, n=10), d / "o.parquet")
    return pl.read_parquet(d / "o.parquet")


@pytest.fixture(scope="module")
def cont(tmp_path_factory) -> pl.DataFrame:
    d = tmp_path_factory.mktemp("cont")
    for i, day in enumerate([date(2024, 1, 3), date(2024, 1, 4)]):
        ingest_dbn_file(es_day_file(d / f"{i}.dbn.zst", day, n=6), d / f"p{i}" / "data.parquet")
    return build_continuous(pl.scan_parquet(sorted(d.glob("p*/data.parquet"))))[0]


def pandera_passes(frame: pl.DataFrame, schema) -> bool:
    try:
        schema.validate(frame, lazy=True)
    except (SchemaErrors, SchemaError):
        return False
    return True


def set_cell(df: pl.DataFrame, row: int, col: str, value) -> pl.DataFrame:
    idx = pl.int_range(pl.len())
    return df.with_columns(
        pl.when(idx == row).then(pl.lit(value, df.schema[col])).otherwise(pl.col(col)).alias(col)
    )


PRICE_VALUES = [None, float("nan"), float("inf"), float("-inf"), 0.0, -1.0, 1e9, 1.0]
EDITS = st.one_of(
    st.tuples(
        st.just("price"),
        st.integers(0, 10**6),
        st.sampled_from(["open", "high", "low", "close"]),
        st.sampled_from(PRICE_VALUES),
    ),
    st.tuples(st.just("null"), st.integers(0, 10**6), st.sampled_from(STRINGS), st.none()),
    st.tuples(st.just("ts"), st.integers(0, 10**6), st.just("ts_event"), st.sampled_from([-1, 0, 1, -86400 * NS])),
    st.tuples(st.just("swap"), st.integers(0, 10**6), st.integers(0, 10**6), st.none()),
    st.tuples(st.just("dup"), st.integers(0, 10**6), st.none(), st.none()),
    st.tuples(st.just("id"), st.integers(0, 10**6), st.just("instrument_id"), st.sampled_from([0, 150, 999])),
)  # fmt: skip


def apply(df: pl.DataFrame, edit: tuple) -> pl.DataFrame:
    kind, row, col, value = edit
    row %= df.height
    if kind in ("price", "null", "id"):
        return set_cell(df, row, col, value)
    if kind == "ts":
        prev = df["ts_event"].to_physical()[max(row - 1, 0)]
        ts = pl.Series([prev + value]).cast(pl.Datetime("ns", "UTC"))[0]
        return set_cell(df, row, "ts_event", ts)
    if kind == "swap":
        order = list(range(df.height))
        other = col % df.height
        order[row], order[other] = order[other], order[row]
        return df[order]
    return pl.concat([df[: row + 1], df[row : row + 1], df[row + 1 :]])


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(edits=st.lists(EDITS, min_size=1, max_size=3), lo=st.integers(-2, 2), hi=st.integers(-2, 2))
def test_screen_never_passes_what_pandera_fails(raw: pl.DataFrame, edits, lo: int, hi: int) -> None:
    df = raw
    for e in edits:
        df = apply(df, e)
    ts = raw["ts_event"].to_physical()
    schema = raw_bars_schema(int(ts.min()) + lo, int(ts.max()) + 1 + hi)
    if screen_passes(df, schema):
        assert pandera_passes(df, schema)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(edits=st.lists(EDITS.filter(lambda e: e[0] not in ("null", "id")), min_size=1, max_size=2))
def test_screen_never_passes_what_pandera_fails_continuous(cont: pl.DataFrame, edits) -> None:
    df = cont
    for e in edits:
        df = apply(df, e)
    if screen_passes(df, continuous_bars_schema()):
        assert pandera_passes(df, continuous_bars_schema())


def test_screen_passes_clean_frames_so_pandera_is_skipped(raw: pl.DataFrame, cont) -> None:
    assert screen_passes(raw, raw_bars_schema(START, END))
    assert screen_passes(cont, continuous_bars_schema())
    # any doubt goes to pandera: other orders, dtypes, a modified schema, empty frames
    assert not screen_passes(raw.sort("ts_event", "instrument_id"), raw_bars_schema())
    assert not screen_passes(raw.with_columns(pl.col("volume").cast(pl.Int64)), raw_bars_schema())
    changed = raw_bars_schema()
    changed.checks = changed.checks[:1]
    assert not screen_passes(raw, changed)
    assert not screen_passes(raw.head(0), raw_bars_schema())


def test_constants_give_the_report_of_materialised_columns(raw: pl.DataFrame) -> None:
    df = raw.sort("instrument_id", "ts_event")
    df = set_cell(df, 3, "high", 1.0)  # crossed bar
    df = pl.concat([df[:8], df[7:8], df[8:]])  # duplicate key straddling a batch edge
    batches = []
    for (_iid,), part in df.group_by("instrument_id", maintain_order=True):
        batches += [part[i : i + 4] for i in range(0, part.height, 4)]
    batches[-1] = batches[-1].with_columns(pl.lit(None, pl.String).alias("root"))

    def run(use_constants: bool):
        v = StreamValidator(raw_bars_schema(START, END), batch_rows=4)
        for b in batches:
            if use_constants:
                consts = {c: b[c][0] for c in STRINGS}
                v.feed(b.drop(STRINGS), consts)
            else:
                v.feed(b)
        return v.result()

    with_consts, plain = run(True), run(False)
    assert not plain.passed and plain.n_failed_rows >= 4
    assert with_consts.message == plain.message
    assert with_consts.failures.equals(plain.failures)
