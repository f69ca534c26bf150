"""Landed files made of real CME records (the vendored extracts in ``tests/data/dbn``), moved
to other dates or altered one field at a time with the project's DBN writer, so a test
lands exactly the problem it is about on real prices, volumes and instruments."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import databento as db
import numpy as np

from foxhunt_pipeline.synthetic.dbn_writer import OHLCV_DTYPE, Mapping, generate_file
from tests.dbn_fixtures import SAMPLE_DBN

NS_PER_DAY = 86_400 * 10**9
#: ESU4 (id 118) and NQU4 (id 4358), 30 minutes each from 2024-07-01 23:40 UTC (18:40 CT:
#: the evening session of trade date 2024-07-02)
JULY = "futures_ohlcv-1m_2024-07-01T23-40_2024-07-02T00-10.dbn.zst"
#: ESM4 and NQM4, 10 minutes on 2024-05-09; ESH6, 10 minutes on 2026-01-09
MAY = "futures_ohlcv-1m_2024-05-09T09-55_2024-05-09T10-05.dbn.zst"
JAN26 = "futures_ohlcv-1m_2026-01-09T20-55_2026-01-09T21-05.dbn.zst"


def real_records(name: str = JULY) -> tuple[np.ndarray, db.DBNStore]:
    """The records of a vendored real file, in the writer's layout, and its store."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = db.DBNStore.from_file(SAMPLE_DBN / name)
        recs = store.to_ndarray()
    return np.asarray(recs).astype(OHLCV_DTYPE), store


def write_real(path: Path, name: str = JULY, *, shift_days: int = 0, records: np.ndarray | None = None,
               end_ns: int | None = None, extra: Sequence[Mapping] = ()) -> Path:
    """``name``'s real records (or ``records``, e.g. a cut or altered copy of them) moved
    ``shift_days`` later, with the header's range and symbol mappings moved alike; ``extra``
    mappings are added as given (an instrument the records were relabelled to)."""
    recs, store = real_records(name)
    recs = (recs if records is None else records).copy()
    shift = shift_days * NS_PER_DAY
    recs["ts_event"] = (recs["ts_event"].astype(np.int64) + shift).astype(np.uint64)
    meta = store.metadata
    days = timedelta(days=shift_days)
    mappings = [Mapping(raw, int(iv["symbol"]), iv["start_date"] + days, iv["end_date"] + days)
                for raw, ivs in meta.mappings.items() for iv in ivs] + list(extra)
    end = meta.end + shift if end_ns is None else end_ns
    return generate_file(path, recs, schema=str(meta.schema), start=meta.start + shift, end=end,
                         symbols=list(meta.symbols), mappings=mappings, stype_in=str(meta.stype_in))
