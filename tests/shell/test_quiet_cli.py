"""A quiet command line (issue 39): the pipeline's lines on the console, each of its warnings
once; the libraries' deprecation notices and progress bars in the home's log file."""

from __future__ import annotations

import logging
import shutil
import warnings

import dagster as dg
import numpy as np
import pytest

from foxhunt_pipeline.cli import quiet
from foxhunt_pipeline.cli.runner import materialize_selection
from foxhunt_pipeline.config.paths import FoxhuntPaths
from tests.dbn_fixtures import SAMPLE_DBN
from tests.real_dbn import JULY, write_real


@pytest.fixture
def routed(tmp_path, monkeypatch):
    """This process's library output routed to ``tmp_path``'s log, undone afterwards; what
    would have been printed is recorded in ``printed``."""
    printed: list[str] = []
    monkeypatch.setattr(warnings, "showwarning", lambda message, *a, **k: printed.append(str(message)))
    monkeypatch.setattr(quiet, "_handler", None)
    monkeypatch.delenv(quiet.PROGRESS_ENV, raising=False)
    for name in quiet.CHATTY_LOGGERS:
        lg = logging.getLogger(name)
        monkeypatch.setattr(lg, "handlers", list(lg.handlers))
        monkeypatch.setattr(lg, "propagate", lg.propagate)
    return quiet.route_library_output(tmp_path), warnings.showwarning, printed


def test_library_notices_go_to_the_log_file_and_ours_to_the_console(routed, capsys):
    import os

    import foxhunt_pipeline.features.build as ours

    log, show, printed = routed
    show("Parameter `backfill_policy` is currently in beta", dg.BetaWarning, ours.__file__, 70)
    show("DataFrame.applymap has been deprecated", FutureWarning, ours.__file__, 71)
    show("torch.ao.quantization is deprecated", UserWarning, dg.__file__, 1)
    show("root ZN has 12 bars, fewer than the feature warm-up", UserWarning, ours.__file__, 72)
    logging.getLogger("mlflow.store").warning("Registered model 'foxhunt-tft' already exists")
    assert printed == ["root ZN has 12 bars, fewer than the feature warm-up"]
    assert "already exists" not in capsys.readouterr().err
    text = log.read_text()
    assert all(x in text for x in ("beta", "applymap", "torch.ao", "already exists"))
    assert "warm-up" not in text
    assert os.environ[quiet.PROGRESS_ENV] == "false"  # MLflow's "Downloading artifacts" bars
    assert log.name == "foxhunt.log" and log.parent.name == "logs"


@pytest.mark.slow
def test_a_data_warning_is_printed_once(foxhunt_home, capsys):
    """The truncation warning was printed by Dagster's console lines and again under the run's
    line: now only under the run's line (the event log and the UI keep it)."""
    paths = FoxhuntPaths.from_env().ensure()
    shutil.copyfile(SAMPLE_DBN / JULY, paths.landing / JULY)
    write_real(paths.landing / "cut-short.dbn.zst", shift_days=7,
               end_ns=int(np.datetime64("2024-07-10T00:00", "ns").astype(np.int64)))
    assert materialize_selection(paths, ["raw_bars"], profile="fast", echo=print)
    out = capsys.readouterr()
    said = out.out + out.err
    assert said.count("cut-short.dbn.zst looks truncated") == 1, said
    assert "    warning: cut-short.dbn.zst looks truncated" in out.out
    # Dagster's engine events (step start, resources, outputs) stay in the event log: a demo
    # printed ~300 of them between the pipeline's lines
    assert " - DEBUG - " not in out.err and "STEP_START" not in out.err, out.err[-2000:]
