"""A quiet command line: the pipeline's own lines on the console, the libraries' chatter in
the home's log file (``$FOXHUNT_HOME/logs/foxhunt.log``).

Third-party deprecation and beta notices (pandas, torch, MLflow, Dagster's ``BetaWarning``
...) say nothing a user of the pipeline can act on, and MLflow's "Downloading artifacts"
progress bars interleave with the run lines: the first go to the log file, the second are
off (``MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR=false``, unless the environment says otherwise).
A warning raised by the project's own code (its own category, or a plain ``UserWarning`` /
``RuntimeWarning`` from its files) is still printed, once per place as Python does.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import warnings
from functools import cache
from pathlib import Path

LOG_DIR = "logs"
LOG_NAME = "foxhunt.log"
OUR_PACKAGES = ("foxhunt_pipeline", "assets", "models", "resources")
#: about a library's API, whoever's call triggered them: the log file's
LIBRARY_CATEGORIES = (DeprecationWarning, PendingDeprecationWarning, FutureWarning, ImportWarning)
#: libraries that print their own log lines to the console
CHATTY_LOGGERS = ("mlflow", "alembic", "urllib3", "git", "lightning", "pytorch_lightning", "optuna")
PROGRESS_ENV = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"

_handler: logging.Handler | None = None


@cache
def _our_dirs() -> tuple[str, ...]:
    dirs = []
    for name in OUR_PACKAGES:
        found = importlib.util.find_spec(name)
        if found is not None and found.submodule_search_locations:
            dirs += [str(Path(d).resolve()) + os.sep for d in found.submodule_search_locations]
    return tuple(dirs)


def is_ours(category: type[Warning], filename: str) -> bool:
    """Whether a warning is the project's to show: its own category, or a plain one raised
    in its files (a library's deprecation notice is the library's wherever it is raised)."""
    module = getattr(category, "__module__", "") or ""
    if module.split(".")[0] in OUR_PACKAGES:
        return True
    if module != "builtins" or issubclass(category, LIBRARY_CATEGORIES):
        return False
    try:
        path = str(Path(filename).resolve())
    except (OSError, ValueError):
        return False
    return path.startswith(_our_dirs())


def route_library_output(home: Path) -> Path:
    """Send this process's third-party warnings and the chatty libraries' log lines to
    ``home/logs/foxhunt.log`` and turn MLflow's download progress bars off; returns the log
    file's path. Call it again once the libraries are imported (MLflow sets its own console
    handler when it is): it re-points their loggers, nothing else changes."""
    global _handler
    os.environ.setdefault(PROGRESS_ENV, "false")
    path = (Path(home) / LOG_DIR / LOG_NAME).resolve()
    if _handler is None or getattr(_handler, "baseFilename", None) != str(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(path, encoding="utf-8", delay=True)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        if _handler is None:
            _install_showwarning()
        _handler = handler
    for name in CHATTY_LOGGERS:
        lg = logging.getLogger(name)
        lg.handlers = [_handler]
        lg.propagate = False
    return path


def _install_showwarning() -> None:
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if _handler is None or is_ours(category, filename):
            shown(message, category, filename, lineno, file, line)
            return
        text = warnings.formatwarning(message, category, filename, lineno, line).rstrip()
        _handler.handle(logging.LogRecord("py.warnings", logging.WARNING, filename, lineno, text, None, None))

    warnings.showwarning = show


def is_routed() -> bool:
    """Whether this process routes library output (the ``foxhunt`` command does; a test
    calling the runner directly does not)."""
    return _handler is not None


__all__ = ["LOG_NAME", "is_ours", "is_routed", "route_library_output"]
