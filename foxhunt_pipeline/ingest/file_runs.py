"""Landed files ingested in runs of several: a year of daily files is a few runs, not hundreds,
whether ``foxhunt materialize`` or the landing sensor starts them."""

from __future__ import annotations

#: landed files ingested per run
INGEST_BATCH = 100


def ingest_batches(partitions: list[str], todo: list[str], size: int = INGEST_BATCH) -> list[list[str]]:
    """``todo`` cut into runs of consecutive landed-file partitions (a run covers a range of
    the registered order, so a batch never spans a file that needs no ingest), at most
    ``size`` files each."""
    wanted = set(todo)
    batches: list[list[str]] = []
    current: list[str] = []
    for key in partitions:
        if key in wanted and len(current) < size:
            current.append(key)
            continue
        if current:
            batches.append(current)
        current = [key] if key in wanted else []
    if current:
        batches.append(current)
    return batches
