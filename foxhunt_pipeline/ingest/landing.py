"""The landing zone: which files count as landed, which are new to the instance, and which
are skipped (another extension) so that the user hears about them instead of nothing.

Shared by the landing sensor and ``foxhunt materialize`` so both register files the same way."""

from __future__ import annotations

import os

from upath import UPath

LANDED_SUFFIXES = (".dbn", ".dbn.zst")  # matched case-insensitively: X.DBN.ZST lands too
PARTITIONS_NAME = "landed_files"
#: what a generator writes beside a landed file (``foxhunt_pipeline.synthetic.run_metadata``):
#: metadata about it, not a file to ingest or to warn about
SIDECAR_SUFFIXES = (".generator.json",)


def is_landed_name(name: str) -> bool:
    """A complete DBN file; dot-files are partial downloads or temp files."""
    return not name.startswith(".") and name.lower().endswith(LANDED_SUFFIXES)


def _file_names(landing: str | os.PathLike[str]) -> list[str]:
    landing = landing if isinstance(landing, UPath) else UPath(landing)
    if not landing.exists():
        return []
    return sorted(p.name for p in landing.iterdir() if p.is_file())


def landed_file_names(landing: str | os.PathLike[str]) -> list[str]:
    """Complete DBN files, oldest name first. ``landing`` is a directory or an object-store
    prefix (``s3://bucket/landing``)."""
    return [n for n in _file_names(landing) if is_landed_name(n)]


def skipped_file_names(landing: str | os.PathLike[str]) -> list[str]:
    """Files in the landing zone that will never be ingested: not dot-files, not DBN by
    their extension (``.csv``, ``.dbn.zstd``, ``.dbn.gz``), not a landed file's sidecar."""
    return [n for n in _file_names(landing) if not n.startswith(".") and not is_landed_name(n)
            and not n.endswith(SIDECAR_SUFFIXES)]


def skipped_message(skipped: list[str], shown: int = 5) -> str:
    """One line naming the skipped files (the first ``shown`` of them)."""
    names = ", ".join(skipped[:shown]) + (f" (+{len(skipped) - shown} more)" if len(skipped) > shown else "")
    return (f"skipped {len(skipped)} landed file(s) with an unsupported extension (only "
            f"{' and '.join(LANDED_SUFFIXES)}, any case, are ingested): {names}")


def unregistered(landing: str | os.PathLike[str], registered: set[str] | list[str]) -> list[str]:
    known = set(registered)
    return [n for n in landed_file_names(landing) if n not in known]
