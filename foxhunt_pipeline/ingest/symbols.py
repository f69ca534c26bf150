"""Which raw symbol and root a bar belongs to on its date, from the DBN header's dated
mappings (parent symbology is keyed by child contracts, spreads included) or definition
files; spreads and unmapped days are dropped."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

import databento_dbn
import numpy as np

from foxhunt_pipeline.ingest.dbn_file import DbnInputError, DbnMetadata, open_store
from foxhunt_pipeline.instruments.specs import is_spread, parse_outright

NS_PER_DAY = 86_400 * 10**9
SPREAD_CLASSES = frozenset({"S", "M", "T"})  # future, mixed and option spreads


@dataclass(frozen=True)
class _Interval:
    start_day: int  # days since epoch, inclusive
    end_day: int  # exclusive
    symbol: str


def _symbol_intervals(meta: DbnMetadata) -> dict[int, list[_Interval]]:
    """instrument_id -> dated raw-symbol intervals, from the header's mappings.

    With ``stype_in=parent`` the mappings are keyed by the child contracts
    (``ESH4``, ``ESH4-ESM4``); with ``raw_symbol`` by the requested symbol; either way
    the interval's symbol is the instrument_id (``stype_out=instrument_id``).
    """
    epoch = date(1970, 1, 1)
    out: dict[int, list[_Interval]] = {}
    for key, intervals in meta.mappings.items():
        for iv in intervals:
            if not iv.get("symbol"):
                continue
            if meta.stype_out == "instrument_id":
                raw, iid = key, iv["symbol"]
            elif meta.stype_in == "instrument_id":
                raw, iid = iv["symbol"], key
            else:
                continue
            try:
                instrument_id = int(iid)
            except ValueError:
                continue
            out.setdefault(instrument_id, []).append(
                _Interval((iv["start_date"] - epoch).days, (iv["end_date"] - epoch).days, raw)
            )
    for ivs in out.values():
        ivs.sort(key=lambda i: i.start_day)
    return out


def _parent_root(meta: DbnMetadata) -> str | None:
    roots = {s.split(".")[0] for s in meta.symbols if s.endswith(".FUT")}
    return roots.pop() if len(roots) == 1 else None


def _root_of(symbol: str, day: int, parent_root: str | None) -> str | None:
    parsed = parse_outright(symbol, date(1970, 1, 1) + timedelta(days=day))
    if parsed is not None:
        return parsed[0]
    return parent_root


def spread_ids_from_definitions(paths: Iterable[Path | str]) -> tuple[set[int], dict[int, str]]:
    """(spread instrument_ids, instrument_id -> raw_symbol) from definition DBN files."""
    spreads: set[int] = set()
    symbols: dict[int, str] = {}
    for p in paths:
        store = open_store(Path(p))
        if store.metadata.schema != "definition":
            raise DbnInputError(
                p, f"expected a definition file, got schema {store.metadata.schema!r}"
            )
        for rec in store:
            if not isinstance(rec, databento_dbn.InstrumentDefMsg):
                continue
            cls = getattr(rec.instrument_class, "value", str(rec.instrument_class))
            symbols[rec.instrument_id] = rec.raw_symbol
            if cls in SPREAD_CLASSES or is_spread(rec.raw_symbol):
                spreads.add(rec.instrument_id)
    return spreads, symbols


# -------------------------------------------------------------------- cleaning


class SymbolResolver:
    """Which rows of an instrument are kept, and under which symbol and root.

    Decided per (instrument_id, UTC day) from the header's dated mappings (falling back
    to definition files): spreads (by definition or symbol form) and unmapped days are
    dropped; everything else is an outright with a root.
    """

    def __init__(self, meta: DbnMetadata, spread_ids: set[int], def_symbols: dict[int, str]):
        self.intervals = _symbol_intervals(meta)
        self.parent_root = _parent_root(meta)
        self.spread_ids = spread_ids
        self.def_symbols = def_symbols
        self.unmapped: set[int] = set()

    def may_keep(self, iid: int) -> bool:
        """False if no row of this instrument can be an outright (skip it while decoding)."""
        if iid in self.spread_ids:
            return False
        names = [iv.symbol for iv in self.intervals.get(iid, ())]
        if iid in self.def_symbols:
            names.append(self.def_symbols[iid])
        if not names:
            self.unmapped.add(iid)
        return any(not is_spread(s) for s in names)

    def segments(self, iid: int, ts: np.ndarray) -> list[tuple[int, int, str | None, str | None]]:
        """(start, stop, symbol, root) runs over one instrument's time-sorted ``ts_event``
        (uint64 ns); symbol None = drop the run. Mapping days cut the run where
        ``ts`` crosses their midnight, so no per-row day is computed."""
        out: list[tuple[int, int, str | None, str | None]] = []
        ivs = self.intervals.get(iid, [])
        cuts = {b for iv in ivs for b in (iv.start_day, iv.end_day)}
        edges = sorted(
            {0, len(ts)}
            | {int(np.searchsorted(ts, np.uint64(max(b, 0) * NS_PER_DAY))) for b in cuts}
        )
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            if lo == hi:
                continue
            d = int(ts[lo]) // NS_PER_DAY
            symbol = next((iv.symbol for iv in ivs if iv.start_day <= d < iv.end_day), None)
            if symbol is None:
                symbol = self.def_symbols.get(iid)
            if symbol is None:
                self.unmapped.add(iid)
                out.append((lo, hi, None, None))
            elif iid in self.spread_ids or is_spread(symbol):
                out.append((lo, hi, None, "spread"))
            else:
                out.append((lo, hi, symbol, _root_of(symbol, d, self.parent_root)))
        return out
