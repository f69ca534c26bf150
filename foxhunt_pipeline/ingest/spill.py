"""Holding area for the instruments an ingest cannot stream straight to parquet."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from foxhunt_pipeline.ingest.records import strictly_after


class SpillArea:
    """Each spilled instrument's records, in file order: in memory while the area holds less
    than ``budget_bytes``, in one raw file per instrument (a temporary directory beside the
    destination) from then on. Memory stays bounded; files that fit never touch the disk."""

    def __init__(self, parent: Path, budget_bytes: int) -> None:
        self._parent = parent
        self.budget_bytes = budget_bytes
        self.mem_bytes = 0
        self._mem: dict[int, list[np.ndarray]] = {}
        self._fhs: dict[int, Any] = {}
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self.clean: dict[int, bool] = {}
        self._last: dict[int, int] = {}
        self.dtype: np.dtype | None = None

    def add(self, iid: int, recs: np.ndarray) -> None:
        self.dtype = recs.dtype
        ts = recs["ts_event"]
        last = self._last.get(iid, -1)
        if self.clean.get(iid, True) and not strictly_after(last, ts):
            self.clean[iid] = False
        else:
            self.clean.setdefault(iid, True)
        self._last[iid] = max(last, int(ts.max()))
        self._mem.setdefault(iid, [])
        if self._dir is None and self.mem_bytes + recs.nbytes <= self.budget_bytes:
            self._mem[iid].append(recs)
            self.mem_bytes += recs.nbytes
            return
        if self._dir is None:  # over budget: from now on every block goes to disk
            self._dir = tempfile.TemporaryDirectory(dir=self._parent, prefix=".ingest-")
        fh = self._fhs.get(iid)
        if fh is None:
            fh = self._fhs[iid] = open(Path(self._dir.name) / f"{iid}.rec", "wb")  # noqa: SIM115
        recs.tofile(fh)

    def ids(self) -> list[int]:
        return sorted(self._mem)

    def blocks(self, iid: int, block: int) -> Iterator[np.ndarray]:
        """The instrument's records in file order (memory first, then its file), released as
        they are handed out."""
        mem = self._mem.pop(iid, [])
        while mem:
            recs = mem.pop(0)
            self.mem_bytes -= recs.nbytes
            yield recs
        fh = self._fhs.pop(iid, None)
        if fh is not None:
            fh.close()
            assert self.dtype is not None
            with open(fh.name, "rb") as rf:
                while len(recs := np.fromfile(rf, dtype=self.dtype, count=block)):
                    yield recs
            os.unlink(fh.name)

    def close(self) -> None:
        for fh in self._fhs.values():
            fh.close()
        self._fhs.clear()
        self._mem.clear()
        if self._dir is not None:
            self._dir.cleanup()
