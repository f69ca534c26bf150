"""The console log of runs started from the shell: Dagster's INFO lines and above (the
steps' progress and warnings; its DEBUG engine events, ~300 lines a demo, stay in the run's
event log), but a failed step shows its error's first line, not its stack trace, and a data
warning that the run summary prints (``warning: ...`` under the run's line) is not printed a
second time. The run summary says what failed and why in one line; the full trace stays in
the run's event log (``foxhunt ui``)."""

from __future__ import annotations

import logging
import sys

import dagster as dg

from assets.common import IN_SUMMARY

_TRACE_MARKERS = ("\nStack Trace:", "\nThe above exception")


class _NoTraces(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, IN_SUMMARY, False):
            return False
        message = record.getMessage()
        cut = min((i for i in (message.find(m) for m in _TRACE_MARKERS) if i >= 0), default=-1)
        if cut >= 0:
            record.msg, record.args = message[:cut].rstrip(), ()
        return True


@dg.logger(
    {"log_level": dg.Field(str, is_required=False, default_value="INFO"),
     "name": dg.Field(str, is_required=False, default_value="dagster")},
    description="Dagster's console lines without stack traces (foxhunt materialize / demo).",
)
def console_without_traces(init_context: dg.InitLoggerContext) -> logging.Logger:
    cfg = init_context.logger_config
    level = logging.getLevelName(cfg["log_level"].upper())
    logger = logging.Logger(cfg["name"], level=level)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s - %(name)s - %(levelname)s - %(message)s"))
    handler.addFilter(_NoTraces())
    logger.addHandler(handler)
    return logger
