"""What the user reads when something goes wrong (issue 18): the project's own error and
the failing check's rows in the run summary; disk full, read-only, offline and a locked
catalogue as one line each; landed names in any case, other extensions listed once."""

from __future__ import annotations

import errno
import importlib
import sys
from datetime import date

import dagster as dg
import pytest
from click.testing import CliRunner
from dagster._utils.error import serializable_error_info_from_exc_info

from foxhunt_pipeline.cli.commands import main
from foxhunt_pipeline.cli.errors import one_line, project_error
from foxhunt_pipeline.cli.runner import materialize_selection
from foxhunt_pipeline.config.paths import FoxhuntPaths
from foxhunt_pipeline.storage.warehouse import raw_bars_partition_path
from tests.dbn_fixtures import es_day_file


def _info(raise_it):
    try:
        raise_it()
    except Exception:
        return serializable_error_info_from_exc_info(sys.exc_info())
    raise AssertionError("nothing raised")


class DbnInputError(ValueError):
    pass


def test_the_summary_shows_the_outermost_project_error_not_the_library_cause():
    def chained():
        try:
            raise RuntimeError("unable to determine encoding")
        except RuntimeError as e:
            raise DbnInputError("x.dbn.zst: truncated zstd stream") from e

    def wrapped():  # what Dagster records for a step: its wrapper around the user's error
        try:
            chained()
        except DbnInputError as e:
            raise dg.DagsterExecutionStepExecutionError("Error occurred while executing op",
                                                        user_exception=e, original_exc_info=sys.exc_info(),
                                                        step_key="raw_bars",
                                                        op_name="raw_bars", op_def_name="raw_bars") from e

    assert project_error(_info(wrapped)) == "x.dbn.zst: truncated zstd stream"


@pytest.mark.parametrize(("code", "words"), [
    (errno.ENOSPC, "disk full"), (errno.EROFS, "read-only"), (errno.EACCES, "permission denied")])
def test_filesystem_faults_are_one_line_in_the_summary(code, words):
    info = _info(lambda: (_ for _ in ()).throw(OSError(code, "nope", "/data/warehouse/x.parquet")))
    line = project_error(info)
    assert line.startswith(words) and "/data/warehouse/x.parquet" in line and "\n" not in line


@pytest.mark.parametrize(("exc", "words"), [
    (OSError(errno.ENOSPC, "No space left on device", "/landing/x.dbn.zst"), "disk full"),
    (PermissionError(errno.EROFS, "Read-only file system", "/landing/x.dbn.zst"), "read-only"),
])
def test_cli_faults_print_one_line_without_a_traceback(foxhunt_home, monkeypatch, exc, words):
    gen = importlib.import_module("foxhunt_pipeline.synthetic.generate")  # the package shadows it

    def fail(*a, **k):
        raise exc

    monkeypatch.setattr(gen, "generate", fail)
    res = CliRunner().invoke(main, ["generate", "--days", "1"])
    assert res.exit_code == 1
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "/landing/x.dbn.zst" in lines[0], res.output


def test_offline_download_is_one_line(foxhunt_home, monkeypatch):
    import requests

    import resources.databento_source as src

    def offline(*a, **k):
        raise requests.exceptions.ConnectionError(
            "HTTPSConnectionPool(host='hist.databento.com', port=443): Max retries exceeded "
            "(Caused by NameResolutionError)")

    monkeypatch.setattr(src, "download_to_landing", offline)
    res = CliRunner().invoke(main, ["download", "--start", "2024-01-02", "--end", "2024-01-03"])
    assert res.exit_code == 1
    assert res.output.strip().splitlines() == [
        "Error: cannot reach hist.databento.com: offline, or the name does not resolve (ConnectionError)"]


def test_a_bug_keeps_its_traceback():
    assert one_line(KeyError("unknown futures root 6E")) is None


@pytest.mark.slow
def test_landing_names_any_case_long_names_and_a_truncated_file(foxhunt_home, capfd):
    paths = FoxhuntPaths.from_env().ensure()
    long_name = "ÉS-" + "é" * 115 + ".OHLCV-1M.DBN.ZST"  # 253 bytes, 3x when encoded
    es_day_file(paths.landing / long_name, date(2024, 1, 2))
    good = es_day_file(paths.home / "t.dbn.zst", date(2024, 1, 3)).read_bytes()
    (paths.landing / "cut.dbn.zst").write_bytes(good[: len(good) // 2])
    for name in ("notes.csv", "x.dbn.zstd"):
        (paths.landing / name).write_text("x")

    log: list[str] = []
    ok = materialize_selection(paths, ["raw_bars"], profile="fast", echo=log.append)

    assert not ok
    text = "\n".join(log)
    assert raw_bars_partition_path(paths.warehouse, long_name).is_file()
    assert sum("skipped 2 landed file(s)" in line for line in log) == 1
    assert "notes.csv" in text and "x.dbn.zstd" in text
    failed = [line for line in log if line.startswith("[FAILED] raw_bars[cut.dbn.zst]")]
    assert len(failed) == 1 and "truncated zstd stream" in failed[0], text
    assert "Traceback" not in text
    console = capfd.readouterr().err  # Dagster's console lines of CLI runs: no stack trace
    assert "STEP_FAILURE" in console and "Stack Trace" not in console
    assert not list((paths.home / "scratch").rglob("*.parquet"))  # the failed decode left nothing
