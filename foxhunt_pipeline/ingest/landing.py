"""The landing zone: which files count as landed, and which are new to the instance.

Shared by the landing sensor and ``foxhunt materialize`` so both register files the same way."""

from __future__ import annotations

import os

from upath import UPath

LANDED_SUFFIXES = (".dbn", ".dbn.zst")
PARTITIONS_NAME = "landed_files"


def landed_file_names(landing: str | os.PathLike[str]) -> list[str]:
    """Complete DBN files, oldest name first; dot-files are partial downloads or temp files.
    ``landing`` is a directory or an object-store prefix (``s3://bucket/landing``)."""
    landing = landing if isinstance(landing, UPath) else UPath(landing)
    if not landing.exists():
        return []
    names = [
        p.name
        for p in landing.iterdir()
        if p.is_file() and not p.name.startswith(".") and p.name.endswith(LANDED_SUFFIXES)
    ]
    return sorted(names)


def unregistered(landing: str | os.PathLike[str], registered: set[str] | list[str]) -> list[str]:
    known = set(registered)
    return [n for n in landed_file_names(landing) if n not in known]
