"""One large DBN file for ingest benchmarks: every session bar of a few front contracts,
exactly ``n_records`` records, streamed through zstd a day at a time.

Why separate from the market simulator: a benchmark needs a known record count and flat
memory, not realism, so it uses plain Gaussian tick moves on the Globex grid (no holidays,
rolls or spreads) and shares only the tick rounding and the file writer.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path

import numpy as np

from foxhunt_pipeline.instruments.specs import ROOTS, RootSpec, contract_symbol, listed_contracts
from foxhunt_pipeline.synthetic.contracts import instrument_id_for
from foxhunt_pipeline.synthetic.dbn_writer import (
    FIXED_PRICE_SCALE,
    STEP_SECONDS,
    Mapping,
    generate_file,
    ohlcv_records,
)
from foxhunt_pipeline.synthetic.market import RANGE_EXTENSION, check_args, tick_moves
from foxhunt_pipeline.synthetic.session import (
    NS,
    bars_per_session,
    session_bar_starts,
    utc_day_start_ns,
)

LARGE_FILE_ROOTS = ("ES", "ZN", "NQ", "CL", "GC")


def generate_large_file(
    path: Path,
    n_records: int,
    schema: str = "ohlcv-1s",
    n_instruments: int = 2,
    seed: int = 7,
    start: date = date(2024, 1, 2),
) -> Path:
    """One big DBN file for benchmarks: ``n_instruments`` front contracts (ES, ZN, NQ, CL,
    GC, then their next contracts) each with a bar in every session second (or minute),
    OHLC-consistent, on the tick grid, exactly ``n_records`` records, streamed through zstd
    one day at a time (memory stays at one day's records)."""
    check_args(("ES",), schema)
    if n_records < 0 or n_instruments < 1:
        raise ValueError("n_records must be >= 0 and n_instruments >= 1")
    step = STEP_SECONDS[schema]
    insts = _instruments(n_instruments, start)
    plan = _day_plan(n_records, n_instruments, step, start)
    end_day = plan[-1][0] + timedelta(days=1) if plan else start + timedelta(days=1)
    mappings = [
        Mapping(contract_symbol(r, *ym), instrument_id_for(r, *ym), start, end_day)
        for r, ym in insts
    ]
    walk = _TickWalk([ROOTS[r] for r, _ in insts], step, seed)
    first = int(plan[0][1][0]) if plan else utc_day_start_ns(start)
    last = int(plan[-1][1][-1]) + step * NS if plan else first
    return generate_file(
        path,
        _day_records(plan, walk, mappings, n_records, schema),
        schema=schema,
        start=first,
        end=last,
        symbols=[f"{r}.FUT" for r in dict.fromkeys(r for r, _ in insts)],
        mappings=mappings,
    )


def _instruments(n_instruments: int, start: date) -> list[tuple[str, tuple[int, int]]]:
    """(root, (year, month)): the front contracts of LARGE_FILE_ROOTS, then the next ones."""
    insts = []
    for k in range(n_instruments):
        root = LARGE_FILE_ROOTS[k % len(LARGE_FILE_ROOTS)]
        ym = listed_contracts(root, start, start + timedelta(days=1))[k // len(LARGE_FILE_ROOTS)]
        insts.append((root, ym))
    return insts


def _day_plan(
    n_records: int, n_instruments: int, step: int, start: date
) -> list[tuple[date, np.ndarray]]:
    """(day, bar starts) from ``start`` on until the days hold ``n_records`` records (the
    last day's bars cut to what is still needed)."""
    plan: list[tuple[date, np.ndarray]] = []
    total, day = 0, start
    while total < n_records:
        ts = session_bar_starts(day, step)
        if ts.size:
            take = min(ts.size, -(-(n_records - total) // n_instruments))
            plan.append((day, ts[:take]))
            total += take * n_instruments
        day += timedelta(days=1)
    return plan


class _TickWalk:
    """Gaussian tick moves for several instruments at once, the price carried day to day."""

    def __init__(self, specs: list[RootSpec], step: int, seed: int) -> None:
        ticks = np.array([s.tick_size for s in specs])
        self.tick_fixed = np.array(
            [round(t * FIXED_PRICE_SCALE) for t in ticks], dtype=np.int64
        )
        self.sd = np.array(
            [s.daily_vol * s.price_level / s.tick_size for s in specs]
        ) / math.sqrt(bars_per_session(step))
        self.level = np.array([round(s.price_level / s.tick_size) for s in specs], dtype=np.int64)
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, len(specs), step]))

    def ohlcv(self, n: int) -> tuple[np.ndarray, ...]:
        """open, high, low, close (in 1e-9 fixed point) and volume of the next ``n`` bars,
        each of shape (n, instruments)."""
        rng, sd = self.rng, self.sd
        moves = tick_moves(rng.standard_normal((n, sd.size)) * sd, rng.random((n, sd.size)))
        close = self.level + np.cumsum(moves, axis=0)
        open_ = np.vstack([self.level, close[:-1]])
        self.level = close[-1]
        up = np.floor(rng.exponential(RANGE_EXTENSION, close.shape) * sd).astype(np.int64)
        dn = np.floor(rng.exponential(RANGE_EXTENSION, close.shape) * sd).astype(np.int64)
        high, low = np.maximum(open_, close) + up, np.minimum(open_, close) - dn
        volume = 1 + rng.poisson(20.0, close.shape)
        f = self.tick_fixed
        return open_ * f, high * f, low * f, close * f, volume


def _day_records(
    plan: list[tuple[date, np.ndarray]],
    walk: _TickWalk,
    mappings: list[Mapping],
    n_records: int,
    schema: str,
) -> Iterator[np.ndarray]:
    """Each planned day's records, the last cut so that there are ``n_records`` in all."""
    ids = np.array([m.instrument_id for m in mappings], dtype=np.uint32)
    remaining = n_records
    for _day, ts in plan:
        recs = ohlcv_records(ids[None, :], ts[:, None], *walk.ohlcv(ts.size), schema=schema)
        recs = recs[:remaining]
        remaining -= recs.size
        yield recs
