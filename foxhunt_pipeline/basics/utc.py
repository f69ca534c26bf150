"""Instants as text: the project's one epoch-nanosecond -> ISO 8601 formatting (issue 26).

Here, in the lowest layer that formats time (``models.evaluation``'s test periods), so
the domain, the assets and the models all write an instant the same way."""

from __future__ import annotations

import numpy as np

NS_PER_S = 1_000_000_000
UTC_OFFSET = "+00:00"  # the zone as pandas and Python write it; "Z" is the default


def iso_utc(ns: int, *, sep: str = "T", zone: str = "Z") -> str:
    """Epoch nanoseconds as ISO 8601 UTC, ``2024-01-02T23:00:00Z``: whole seconds unless
    the instant has a fraction, then 6 digits (9 below a microsecond), as pandas writes it.

    ``zone=UTC_OFFSET`` is the form of the ingest messages, Dagster metadata and model
    cards (pandas' ``Timestamp.isoformat()``); ``sep=" ", zone=UTC_OFFSET`` that of a
    dataset's ``meta["splits"]`` (Python's ``str(datetime)``). Both are kept as they were
    written: tests, stored files and readers hold those strings."""
    ns = int(ns)
    text = np.datetime_as_string(np.datetime64(ns, "ns"), unit="s")
    frac = ns % NS_PER_S
    if frac:
        text += f".{frac // 1000:06d}" if frac % 1000 == 0 else f".{frac:09d}"
    return text.replace("T", sep) + zone


__all__ = ["NS_PER_S", "UTC_OFFSET", "iso_utc"]
