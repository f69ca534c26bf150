"""The command line: help everywhere, clear errors, generate into the landing zone."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from foxhunt_pipeline.cli.commands import main

COMMANDS = ["generate", "materialize", "tune", "demo", "ui", "download", "predict", "forecast", "sql"]


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_every_command_has_help(command):
    args = [command, "--help"] if command else ["--help"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    if command is None:
        for c in COMMANDS:
            assert c in result.output


def test_download_without_key_is_a_clear_error_and_writes_nothing(foxhunt_home, monkeypatch):
    monkeypatch.delenv("DATABENTO_API_KEY", raising=False)
    result = CliRunner().invoke(main, ["download", "--start", "2024-03-01", "--end", "2024-03-02"])
    assert result.exit_code != 0
    assert "DATABENTO_API_KEY" in result.output
    assert list((foxhunt_home / "landing").iterdir()) == []


def test_download_never_prints_the_key(foxhunt_home, monkeypatch):
    monkeypatch.setenv("DATABENTO_API_KEY", "db-SECRETSECRETSECRET")
    result = CliRunner().invoke(main, ["download", "--start", "2024-03-05", "--end", "2024-03-01"])
    assert result.exit_code != 0
    assert "before --start" in result.output
    assert "SECRET" not in result.output


def test_download_rejects_bad_dates(foxhunt_home):
    result = CliRunner().invoke(main, ["download", "--start", "March 1", "--end", "2024-03-02"])
    assert result.exit_code != 0
    assert "ISO" in result.output


def test_generate_writes_daily_files_into_landing(foxhunt_home):
    result = CliRunner().invoke(main, ["generate", "--days", "2", "--roots", "ES", "--start", "2024-01-02"])
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in (foxhunt_home / "landing").iterdir())
    files = ["glbx-mdp3-20240102.ohlcv-1m.dbn.zst", "glbx-mdp3-20240103.ohlcv-1m.dbn.zst"]
    assert names == sorted(files + [f + ".generator.json" for f in files])
    assert "oracle" in result.output  # the oracle's Sharpe after costs, from the sidecars


def test_sql_reads_the_duckdb_file_and_names_a_missing_one(foxhunt_home):
    missing = CliRunner().invoke(main, ["sql", "select 1"])
    assert missing.exit_code != 0 and "foxhunt.duckdb" in missing.output
    import duckdb

    with duckdb.connect(str(foxhunt_home / "foxhunt.duckdb")) as con:
        con.execute("create table rolls as select 'ES' as root, 'ESH4' as from_symbol").fetchall()
    ok = CliRunner().invoke(main, ["sql", "select root, from_symbol from rolls"])
    assert ok.exit_code == 0, ok.output
    assert "ESH4" in ok.output
    bad = CliRunner().invoke(main, ["sql", "select * from nope"])
    assert bad.exit_code != 0 and "nope" in bad.output


def test_download_lands_in_the_object_store_when_the_landing_zone_is_a_url(
        foxhunt_home, monkeypatch, tmp_path):
    import databento
    from upath import UPath

    landing = UPath(f"memory://cli-{tmp_path.name}/landing")
    monkeypatch.setenv("FOXHUNT_LANDING_URL", str(landing))
    monkeypatch.setenv("DATABENTO_API_KEY", "db-test")
    calls = []

    class FakeTimeseries:
        def get_range(self, *, path, **kw):
            calls.append(kw)
            with open(path, "wb") as f:
                f.write(b"DBN-bytes")

    class FakeHistorical:
        def __init__(self, key):
            self.timeseries = FakeTimeseries()

    monkeypatch.setattr(databento, "Historical", FakeHistorical)
    args = ["download", "--start", "2024-03-01", "--end", "2024-03-02"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    name = "glbx-mdp3-20240301-20240302.ohlcv-1m.dbn.zst"
    assert (landing / name).read_bytes() == b"DBN-bytes"
    assert not list((foxhunt_home / "landing").iterdir())  # nothing landed locally
    again = CliRunner().invoke(main, args)  # the vendor file again: refused, not overwritten
    assert again.exit_code != 0 and "never overwritten" in again.output
    assert (landing / name).read_bytes() == b"DBN-bytes" and len(calls) == 1  # nothing re-bought
    landing.fs.rm(landing.path, recursive=True)


def test_tune_materializes_the_family_study_with_the_trials_asked(foxhunt_home, monkeypatch):
    from foxhunt_pipeline.cli import runner

    calls = []
    monkeypatch.setattr(runner, "materialize_selection",
                        lambda paths, selection, **kw: calls.append((selection, kw)) or True)
    monkeypatch.setenv("FOXHUNT_OPTUNA_URL", "postgresql://optuna:s3cret@db/optuna")
    result = CliRunner().invoke(main, ["tune", "mamba2", "--trials", "3", "--study", "shared"])
    assert result.exit_code == 0, result.output
    assert "db/optuna" in result.output and "s3cret" not in result.output
    (selection, kw), = calls
    assert selection == ["mamba2_tuning"]
    assert kw["run_config"] == {"ops": {"mamba2_tuning": {"config": {"n_trials": 3, "study_name": "shared"}}}}
    result = CliRunner().invoke(main, ["tune", "lstm"])
    assert result.exit_code != 0 and "lstm" in result.output


def test_all_leaves_out_the_studies_and_a_named_study_is_selected():
    from foxhunt_pipeline.cli.runner import parse_selection
    from foxhunt_pipeline.definitions import defs

    graph = defs.resolve_asset_graph()

    def names(selection):
        return {k.to_user_string() for k in parse_selection(selection).resolve(graph)}

    everything = names(["*"])
    assert "tft_model" in everything and not {n for n in everything if n.endswith("_tuning")}
    assert names(["group:tuning"]) == {"tft_tuning", "mamba2_tuning", "dqn_tuning", "ppo_tuning"}
    assert names(["tft_tuning", "*"]) == everything | {"tft_tuning"}
