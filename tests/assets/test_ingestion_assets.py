"""raw_bars as an asset: a crossed bar fails the blocking check (rows named), the partition's
previous good version stays live, the landed file is untouched and the CLI runner says FAILED."""

from __future__ import annotations

import hashlib
from datetime import date

import numpy as np
import polars as pl

from foxhunt_pipeline.cli.runner import materialize_selection
from foxhunt_pipeline.config.paths import FoxhuntPaths
from foxhunt_pipeline.storage.warehouse import raw_bars_partition_path
from foxhunt_pipeline.synthetic.dbn_writer import Mapping, generate_file, ohlcv_records

DAY = date(2024, 1, 3)
START = 1_704_240_000_000_000_000  # 2024-01-03T00:00Z
NAME = "glbx-mdp3-20240103.ohlcv-1m.dbn.zst"


def _write(path, crossed: bool) -> None:
    n = 30
    ts = START + np.arange(n, dtype=np.int64) * 60_000_000_000
    close = (4800.0 + np.cumsum(np.full(n, 0.25))) * 1e9
    high, low = close + 0.5e9, close - 0.5e9
    if crossed:
        high[7] = low[7] - 1e9  # high below low: not a price bar
    recs = ohlcv_records(101, ts, close.astype(np.int64), high.astype(np.int64), low.astype(np.int64),
                         close.astype(np.int64), np.full(n, 10), schema="ohlcv-1m")
    generate_file(path, recs, schema="ohlcv-1m", start=START, end=START + 86_400 * 10**9,
                  symbols=["ES.FUT"], mappings=[Mapping("ESH4", 101, DAY, date(2024, 1, 4))])


def test_crossed_bar_fails_the_check_and_keeps_the_previous_version(foxhunt_home):
    paths = FoxhuntPaths.from_env().ensure()
    landed = paths.landing / NAME
    _write(landed, crossed=False)
    log: list[str] = []
    assert materialize_selection(paths, ["raw_bars"], profile="fast", echo=log.append), log
    live = raw_bars_partition_path(paths.warehouse, NAME)
    good = pl.read_parquet(live)
    assert good.height == 30

    # the vendor re-delivers a broken file under the same name: re-ingest it
    landed.unlink()
    _write(landed, crossed=True)
    checksum = hashlib.sha256(landed.read_bytes()).hexdigest()
    log.clear()
    ok = materialize_selection(paths, ["raw_bars"], profile="fast", all_partitions=True, echo=log.append)
    assert not ok
    assert any("FAILED" in line and "raw_bars_contract" in line for line in log), log
    # the summary says why, with the failing row, not only the check's name
    assert any("raw_bars.raw_bars_contract: " in line and "ohlc_consistent" in line and "[7]" in line
               for line in "\n".join(log).splitlines()), log
    assert pl.read_parquet(live).equals(good)  # the previous good version is still what readers see
    quarantined = list((paths.warehouse / "_quarantine" / "raw_bars").rglob("*.parquet"))
    assert len(quarantined) == 1
    assert hashlib.sha256(landed.read_bytes()).hexdigest() == checksum

    import dagster as dg

    instance = dg.DagsterInstance.from_config(str(paths.dagster_home))
    try:
        evals = instance.event_log_storage.get_latest_asset_check_execution_by_key(
            [dg.AssetCheckKey(dg.AssetKey("raw_bars"), "raw_bars_contract")])
        record = next(iter(evals.values()))
        meta = record.event.dagster_event.event_specific_data.metadata
        assert meta["failed_rows"].value >= 1
        assert "ohlc_consistent" in meta["message"].value and "[7]" in meta["message"].value  # names the row
    finally:
        instance.dispose()
