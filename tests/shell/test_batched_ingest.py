"""Many landed files are ingested in few runs; a bad file among them still gets its own,
named failure and costs the good files nothing."""

from __future__ import annotations

from datetime import date

import dagster as dg

from foxhunt_pipeline.cli.instance import get_instance
from foxhunt_pipeline.cli.runner import materialize_selection
from foxhunt_pipeline.config.paths import FoxhuntPaths
from foxhunt_pipeline.ingest.file_runs import ingest_batches
from foxhunt_pipeline.synthetic.generate import generate

RAW = dg.AssetKey("raw_bars")


def test_batches_are_runs_of_consecutive_files_to_ingest():
    keys = [f"f{i}" for i in range(7)]
    assert ingest_batches(keys, keys, size=3) == [["f0", "f1", "f2"], ["f3", "f4", "f5"], ["f6"]]
    # a file already ingested splits the range: a run covers every key between its ends
    assert ingest_batches(keys, ["f0", "f1", "f3", "f6"], size=10) == [["f0", "f1"], ["f3"], ["f6"]]
    assert ingest_batches(keys, []) == []


def _raw_runs(instance) -> list[dg.DagsterRun]:
    return [r for r in instance.get_runs() if r.asset_selection == {RAW}]


def test_landed_files_are_ingested_in_one_run_and_a_bad_one_falls_back_to_its_own(foxhunt_home):
    paths = FoxhuntPaths.from_env().ensure()
    files = generate(paths.landing, days=4, roots=("ES",), schema="ohlcv-1m", start=date(2024, 1, 2), seed=5)
    log: list[str] = []
    assert materialize_selection(paths, ["raw_bars"], profile="fast", echo=log.append), log
    instance = get_instance(paths)
    assert len(_raw_runs(instance)) == 1
    assert instance.get_materialized_partitions(RAW) == {f.name for f in files}

    good = generate(paths.landing, days=2, roots=("ES",), schema="ohlcv-1m", start=date(2024, 1, 9), seed=6)
    bad = paths.landing / "glbx-mdp3-20240108.ohlcv-1m.dbn.zst"  # sorts between them
    bad.write_bytes(files[0].read_bytes()[:200])
    log.clear()
    assert not materialize_selection(paths, ["raw_bars"], profile="fast", echo=log.append)
    text = "\n".join(log)
    assert "ingesting them one by one" in text
    assert f"[FAILED] raw_bars[{bad.name}]" in text, text
    assert {f.name for f in good} <= instance.get_materialized_partitions(RAW)
    assert bad.name not in instance.get_materialized_partitions(RAW)
    assert bad.read_bytes() == files[0].read_bytes()[:200]  # the landed file is never touched
