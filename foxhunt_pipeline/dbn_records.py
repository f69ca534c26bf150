"""DBN record arrays: read in chunks, split by instrument, checked and put in time order.

Reading goes through ``databento.DBNStore``; a truncated or corrupt stream becomes a
:class:`DbnInputError` naming the file rather than a warning or a bare library error.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import databento_dbn
import numpy as np
import polars as pl
import zstandard
from databento.common.error import BentoError, BentoWarning

from foxhunt_pipeline.dbn_open import DbnInputError, _StrictDBNStore


def _split_by_instrument(arr: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(instrument_id, its records in file order) for each instrument in a chunk."""
    ids = arr["instrument_id"]
    first = ids[0]
    if (ids == first).all():
        yield int(first), arr
        return
    # gather whole records as rows of 8-byte words: a plain block copy, several times
    # faster than numpy's per-field copy of a structured array
    words = arr.dtype.itemsize // 8 if arr.dtype.itemsize % 8 == 0 else 0
    flat = np.ascontiguousarray(arr).view(np.uint64).reshape(len(arr), words) if words else None

    def take(sel: np.ndarray) -> np.ndarray:
        return flat[sel].reshape(-1).view(arr.dtype) if flat is not None else arr[sel]

    uniq = pl.Series(ids).unique().sort().to_numpy()
    if len(uniq) <= 8:  # a few outrights: one comparison pass per instrument beats a sort
        for iid in uniq:
            yield int(iid), take(ids == iid)
        return
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    cuts = np.flatnonzero(sorted_ids[1:] != sorted_ids[:-1]) + 1
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(ids)], strict=True):
        yield int(sorted_ids[lo]), take(order[lo:hi])


def _dedupe_sorted(recs: np.ndarray) -> np.ndarray:
    """Sort one instrument's records by (ts_event, publisher_id), keep each key's first."""
    order = np.lexsort((recs["publisher_id"], recs["ts_event"]))  # stable
    recs = recs[order]
    if len(recs) < 2:
        return recs
    same = (recs["ts_event"][1:] == recs["ts_event"][:-1]) & (
        recs["publisher_id"][1:] == recs["publisher_id"][:-1]
    )
    return recs[np.r_[True, ~same]]


def _iter_chunks(store: _StrictDBNStore, src: Path, chunk_records: int) -> Iterator[np.ndarray]:
    """Chunks of records; a truncated or corrupt stream is a DbnInputError, not a warning."""
    try:
        chunks = iter(store.to_ndarray(count=chunk_records))
        while True:
            with warnings.catch_warnings():
                warnings.simplefilter("error", BentoWarning)
                arr = next(chunks, None)
            if arr is None:
                return
            if len(arr):
                yield arr
    except BentoWarning as exc:
        raise DbnInputError(src, f"truncated DBN data ({exc})") from exc
    except zstandard.ZstdError as exc:
        raise DbnInputError(src, f"corrupt zstd data ({exc})") from exc
    except (BentoError, databento_dbn.DBNError) as exc:
        raise DbnInputError(src, f"corrupt DBN records ({exc})") from exc


def _strictly_after(last_ts: int, ts: np.ndarray) -> bool:
    """``ts`` strictly increasing and after ``last_ts``: sorted and duplicate-free."""
    return int(ts[0]) > last_ts and (len(ts) < 2 or bool((ts[1:] > ts[:-1]).all()))
