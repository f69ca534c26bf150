"""Synthetic CME futures bars, landed as Databento GLBX.MDP3 batch files.

Why: every layer needs realistic input without a Databento key, and the models
need data with a known, weak edge (and a control without one) so a test can
tell learning from overfitting.

Layout, as a Databento batch download split by day: one file per UTC day,
``glbx-mdp3-YYYYMMDD.ohlcv-1m.dbn.zst`` (or ``.ohlcv-1s.``), DBN v3, dataset
GLBX.MDP3, ``stype_in=parent`` with symbols ``ES.FUT``..., ``stype_out=
instrument_id``, metadata start/end = the UTC day, and ``mappings`` keyed by
child raw symbol (``ESH4``, ``ESM4``, ``ESH4-ESM4``) -> instrument_id for that
day. Records are sorted by (ts_event, instrument_id); a UTC day without bars
(Saturday) gets no file.

The package is split by concept, and every public name stays importable from here:

* :mod:`.market`: the simulated market (price, volatility, the predictable
  components, contracts, spreads, volume, OHLC) and its constants.
* :mod:`.signal`: the latent drift that pays after costs, and the oracle that knows it.
* :mod:`.run_metadata`: the per-file sidecar ``<file>.generator.json`` (parameters and
  oracle statistics) and :func:`oracle_summary`, which reads them back.
* :mod:`.session`: Globex hours, holidays and early closes, seasonality.
* :mod:`.contracts`: instrument ids, last-trade instants, roll dates.
* :mod:`.large`: one large file for ingest benchmarks.
* :mod:`.dbn_writer`: the byte-exact DBN writer.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import date, datetime, time, timedelta
from pathlib import Path

import numpy as np
from tqdm import tqdm

# Every name this module defined or imported before the split stays importable from here;
# the ``X as X`` ones are helpers callers may have reached through it, not its own API.
from foxhunt_pipeline.instruments.specs import ROOTS as ROOTS
from foxhunt_pipeline.instruments.specs import RootSpec as RootSpec
from foxhunt_pipeline.instruments.specs import contract_symbol as contract_symbol
from foxhunt_pipeline.instruments.specs import expiry_date as expiry_date
from foxhunt_pipeline.instruments.specs import listed_contracts as listed_contracts
from foxhunt_pipeline.instruments.specs import spec as spec
from foxhunt_pipeline.instruments.specs import spread_symbol as spread_symbol
from foxhunt_pipeline.synthetic.contracts import (
    LAST_TRADE_CT,
    instrument_id_for,
    last_trade_ns,
    roll_centre_ns,
)
from foxhunt_pipeline.synthetic.dbn_writer import (
    FIXED_PRICE_SCALE,
    OHLCV_DTYPE,
    STEP_SECONDS,
    LandedFileConflict,
    Mapping,
    generate_file,
    ohlcv_records,
    sort_records,
)
from foxhunt_pipeline.synthetic.events import MarketEvents, apply_to_records
from foxhunt_pipeline.synthetic.large import LARGE_FILE_ROOTS, generate_large_file
from foxhunt_pipeline.synthetic.market import (
    AR1_RHO,
    AVG_TRADE_SIZE,
    BASIS_MOVES_PER_SESSION,
    CARRY_BY_CLASS,
    GAP_VAR_PER_CLOSED_DAY,
    GENERATED_SCHEMAS,
    MIN_CONTRACT_SHARE,
    RANGE_EXTENSION,
    ROLL_WIDTH_DAYS,
    SPREAD_ROLL_SHARE,
    SPREAD_ROLL_WIDTH_DAYS,
    SPREAD_SHARE,
    T_DOF,
    VOL_FAST_HALF_LIFE_S,
    VOL_FAST_SD,
    VOL_SLOW_HALF_LIFE_S,
    VOL_SLOW_SD,
    WEEKEND_CLOSED_HOURS,
    RootSimulator,
    SimParams,
    check_args,
)
from foxhunt_pipeline.synthetic.run_metadata import (
    SIDECAR_SUFFIX,
    generator_config,
    oracle_summary,
    read_sidecar,
    sidecar_path,
    write_sidecar,
)
from foxhunt_pipeline.synthetic.session import CHICAGO as CHICAGO
from foxhunt_pipeline.synthetic.session import (
    DAY_S,
    NS,
    open_for,
    session_bar_starts,
    utc_day_start_ns,
)
from foxhunt_pipeline.synthetic.session import OPEN_S as OPEN_S
from foxhunt_pipeline.synthetic.session import bars_per_session as bars_per_session
from foxhunt_pipeline.synthetic.session import chicago_clock as chicago_clock
from foxhunt_pipeline.synthetic.session import seasonality as seasonality
from foxhunt_pipeline.synthetic.signal import (
    DEFAULT_DRIFT,
    DRIFT_HALF_LIFE_S,
    DRIFT_SD,
    NO_DRIFT,
    ORACLE_HORIZON,
    DriftParams,
    OracleDay,
)

__all__ = [
    "AR1_RHO",
    "DEFAULT_DRIFT",
    "DRIFT_HALF_LIFE_S",
    "DRIFT_SD",
    "NO_DRIFT",
    "ORACLE_HORIZON",
    "SIDECAR_SUFFIX",
    "DriftParams",
    "OracleDay",
    "AVG_TRADE_SIZE",
    "BASIS_MOVES_PER_SESSION",
    "CARRY_BY_CLASS",
    "FIXED_PRICE_SCALE",
    "GAP_VAR_PER_CLOSED_DAY",
    "GENERATED_SCHEMAS",
    "LARGE_FILE_ROOTS",
    "LAST_TRADE_CT",
    "LandedFileConflict",
    "MIN_CONTRACT_SHARE",
    "Mapping",
    "NS",
    "OHLCV_DTYPE",
    "RANGE_EXTENSION",
    "ROLL_WIDTH_DAYS",
    "SPREAD_ROLL_SHARE",
    "SPREAD_ROLL_WIDTH_DAYS",
    "SPREAD_SHARE",
    "STEP_SECONDS",
    "T_DOF",
    "VOL_FAST_HALF_LIFE_S",
    "VOL_FAST_SD",
    "VOL_SLOW_HALF_LIFE_S",
    "VOL_SLOW_SD",
    "WEEKEND_CLOSED_HOURS",
    "break_instant_ns",
    "dbn_file_name",
    "generate",
    "generate_file",
    "generate_large_file",
    "instrument_id_for",
    "iter_days",
    "last_trade_ns",
    "ohlcv_records",
    "open_for",
    "oracle_summary",
    "read_sidecar",
    "roll_centre_ns",
    "session_bar_starts",
    "sidecar_path",
    "sort_records",
    "utc_day_start_ns",
    "write_sidecar",
]


def dbn_file_name(day: date, schema: str) -> str:
    return f"glbx-mdp3-{day:%Y%m%d}.{schema}.dbn.zst"


def break_instant_ns(trade_date: date) -> int:
    """The first instant of CME trade date ``trade_date``: 17:00 America/Chicago the calendar
    day before (the evening session already trades the next day's date)."""
    opens = datetime.combine(trade_date - timedelta(days=1), time(17), tzinfo=CHICAGO)
    return int(opens.timestamp()) * NS


def iter_days(
    days: int,
    roots: Sequence[str] = ("ES", "ZN"),
    schema: str = "ohlcv-1m",
    start: date = date(2024, 1, 2),
    seed: int = 7,
    random_walk: bool = False,
    events: MarketEvents | None = None,
    break_at: date | None = None,
) -> Iterator[tuple[date, np.ndarray, list[Mapping]]]:
    """(UTC day, sorted records, mappings) for each day, without writing anything."""
    for day, recs, maps, _ in _simulate(days, roots, schema, start, seed, random_walk, events,
                                        break_at):
        yield day, recs, maps


def _simulate(
    days: int,
    roots: Sequence[str],
    schema: str,
    start: date,
    seed: int,
    random_walk: bool,
    events: MarketEvents | None = None,
    break_at: date | None = None,
) -> Iterator[tuple[date, np.ndarray, list[Mapping], dict[str, OracleDay]]]:
    """As :func:`iter_days`, plus each root's oracle statistics for the day. ``events``
    (:mod:`.events`): outages, news jumps, bad prints, holiday sessions; none by default."""
    check_args(roots, schema)
    step = STEP_SECONDS[schema]
    params = SimParams(
        step_s=step,
        rho=0.0 if random_walk else AR1_RHO,
        start=start,
        drift=NO_DRIFT if random_walk else DEFAULT_DRIFT,
        break_ns=None if break_at is None else break_instant_ns(break_at),
    )
    sims = [RootSimulator(r, seed, params) for r in roots]
    for i in range(days):
        day = start + timedelta(days=i)
        ts = session_bar_starts(day, step)
        parts, maps, oracle = [], [], {}
        for sim in sims:
            recs, m = sim.simulate_day(day, open_for(sim.root, ts), events)
            if events:
                spreads = {x.instrument_id for x in m if "-" in x.raw_symbol}
                recs = apply_to_records(events, sim.root, recs, sim.tick_fixed, spreads)
            parts.append(recs)
            maps.extend(m)
            if sim.last_oracle is not None and recs.size:
                oracle[sim.root] = sim.last_oracle
        recs = sort_records(np.concatenate(parts)) if parts else np.empty(0, dtype=OHLCV_DTYPE)
        yield day, recs, maps, oracle


def generate(
    out_dir: Path,
    days: int,
    roots: Sequence[str] = ("ES", "ZN"),
    schema: str = "ohlcv-1m",
    start: date = date(2024, 1, 2),
    seed: int = 7,
    random_walk: bool = False,
    progress: bool = False,
    events: MarketEvents | None = None,
    break_at: date | None = None,
) -> list[Path]:
    """Land ``days`` UTC days of synthetic bars from ``start`` under ``out_dir``; returns the
    files written (or already present with identical bytes). Days without bars get no file.
    Each file gets a sidecar ``<file>.generator.json`` with the generator's parameters and
    the oracle's statistics for that day (:mod:`.run_metadata`; read them back with
    :func:`oracle_summary`). ``events`` (:mod:`.events`) add outages, news jumps, bad prints
    and holiday sessions (none by default: the files are those of a run without them).
    ``break_at`` switches the predictable components off from the start of that CME trade
    date on (a regime change, :mod:`.market`); without it the output is byte for byte what it
    always was. Raises :class:`LandedFileConflict` rather than overwrite a different existing
    file or sidecar."""
    if days < 0:
        raise ValueError(f"days must be >= 0, got {days}")
    check_args(roots, schema)
    out_dir = Path(out_dir)
    symbols = [f"{r}.FUT" for r in roots]
    config = generator_config(roots, schema, start, seed, random_walk)
    if events:
        config["events"] = events.as_config()
    if break_at is not None:
        config["break_at"] = break_at.isoformat()
    it = _simulate(days, roots, schema, start, seed, random_walk, events, break_at)
    if progress:
        it = tqdm(it, total=days, desc="generate", unit="day")
    written: list[Path] = []
    for day, recs, maps, oracle in it:
        if recs.size == 0:
            continue
        t0 = utc_day_start_ns(day)
        path = generate_file(
            out_dir / dbn_file_name(day, schema),
            recs,
            schema=schema,
            start=t0,
            end=t0 + DAY_S * NS,
            symbols=symbols,
            mappings=maps,
        )
        write_sidecar(path, day, config, oracle)
        written.append(path)
    return written
