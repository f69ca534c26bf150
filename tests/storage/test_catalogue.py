"""A user's open DuckDB connection (a notebook) never makes a catalogue write fail, and
``foxhunt sql`` against a catalogue locked by someone else prints one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest
from click.testing import CliRunner

from foxhunt_pipeline.cli.commands import main
from foxhunt_pipeline.storage import warehouse

# holds a connection open until its stdin closes; says "open" once it is
HOLDER = """
import sys, duckdb
con = duckdb.connect(sys.argv[1], read_only=sys.argv[2] == "ro")
print(con.sql("select count(*) from duckdb_tables()").fetchall(), flush=True)
print("open", flush=True)
sys.stdin.read()
print(con.sql("select count(*) from model_evaluations").fetchall(), flush=True)
"""


def _hold(path: Path, mode: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), mode], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stdout:  # type: ignore[union-attr]
        lines.append(line)
        if line.strip() == "open":
            return proc
    raise AssertionError(f"holder did not open {path}: {lines} {proc.stderr.read()}")  # type: ignore[union-attr]


def test_a_held_open_reader_does_not_block_catalogue_writes(tmp_path):
    db = tmp_path / "foxhunt.duckdb"
    warehouse.append_duckdb_table(db, "model_evaluations", pl.DataFrame({"model": ["a"], "sharpe": [1.0]}))
    reader = _hold(db, "ro")
    try:
        # both kinds of write succeed while the reader holds its shared lock
        n = warehouse.append_duckdb_table(db, "model_evaluations",
                                          pl.DataFrame({"model": ["b"], "sharpe": [2.0]}))
        part = tmp_path / "wh" / "continuous_bars" / "data.parquet"
        warehouse.write_parquet_atomic(pl.DataFrame({"x": [1, 2]}), part)
        views = warehouse.refresh_duckdb_views(db, tmp_path / "wh", rolls=pl.DataFrame({"root": ["ES"]}))
    finally:
        out, _ = reader.communicate("", timeout=60)
    assert n == 2 and views == ["continuous_bars"]
    assert "[(1,)]" in out  # the reader kept the version it opened, and was never broken
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.sql("select count(*) from model_evaluations").fetchall() == [(2,)]
        assert con.sql("select sum(x) from continuous_bars").fetchall() == [(3,)]
        assert con.sql("select root from rolls").fetchall() == [("ES",)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foxhunt.duckdb", "foxhunt.duckdb.lock", "wh"]


def test_a_failed_catalogue_write_leaves_the_catalogue_as_it_was(tmp_path):
    db = tmp_path / "foxhunt.duckdb"
    warehouse.append_duckdb_table(db, "model_evaluations", pl.DataFrame({"model": ["a"]}))
    with pytest.raises(duckdb.Error), warehouse.catalogue_writer(db) as con:
        con.execute("DROP TABLE model_evaluations").fetchall()
        con.execute("SELECT * FROM no_such_table").fetchall()
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.sql("select count(*) from model_evaluations").fetchall() == [(1,)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foxhunt.duckdb", "foxhunt.duckdb.lock"]


def test_sql_on_a_catalogue_locked_by_a_writer_is_one_line(foxhunt_home):
    db = foxhunt_home / "foxhunt.duckdb"
    warehouse.append_duckdb_table(db, "model_evaluations", pl.DataFrame({"model": ["a"]}))
    writer = _hold(db, "rw")  # someone's read-write connection: an exclusive lock
    try:
        res = CliRunner().invoke(main, ["sql", "select 1", "--home", str(foxhunt_home)])
    finally:
        writer.communicate("", timeout=60)
    assert res.exit_code == 1
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "locked" in lines[0] and str(db) in lines[0], res.output
    assert "Traceback" not in res.output
