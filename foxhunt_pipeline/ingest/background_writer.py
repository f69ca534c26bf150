"""Parquet encoding on its own thread, overlapping the caller's decoding."""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


class BackgroundWriter:
    """A ``ParquetWriter`` fed through a short queue by one thread: Arrow encodes and
    compresses a row group with the GIL released while the caller decodes the next chunk.
    The first write error stops writing and is raised to the caller."""

    _STOP = object()

    def __init__(self, path: Path, schema: pa.Schema, **options: Any) -> None:
        self._writer = pq.ParquetWriter(path, schema, **options)
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=4)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="raw-bars-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (item := self._queue.get()) is not self._STOP:
            if self._error is None:
                try:
                    self._writer.write_batch(item)
                except BaseException as exc:  # handed to the caller
                    self._error = exc

    def write(self, batch: pa.RecordBatch) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(batch)

    def close(self) -> None:
        """Flush and close; raises the writer thread's error, if any."""
        self._queue.put(self._STOP)
        self._thread.join()
        self._writer.close()
        if self._error is not None:
            raise self._error
