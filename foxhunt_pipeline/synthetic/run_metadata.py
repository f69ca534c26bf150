"""What a generate call knew: a sidecar ``<file>.generator.json`` beside each landed file.

Why a sidecar: DBN metadata has no free-form field, and a landed file is never rewritten.
The sidecar holds the generator's parameters (seed, schema, the predictable components and
their strength) and the oracle's statistics for that UTC day per root, as sums
(:class:`.signal.OracleDay`), so :func:`oracle_summary` can pool any range of days, e.g. a
walk-forward fold's test days, exactly. Like the DBN file it is written atomically, an
identical one is left alone and a different one is refused (:class:`LandedFileConflict`).
The landing sensor only registers ``.dbn`` / ``.dbn.zst`` names, so it ignores sidecars.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import Any

from upath import UPath

from foxhunt_pipeline.ingest.landing import SIDECAR_SUFFIXES, landed_file_names
from foxhunt_pipeline.instruments.specs import spec
from foxhunt_pipeline.synthetic.dbn_writer import STEP_SECONDS, land
from foxhunt_pipeline.synthetic.market import AR1_RHO
from foxhunt_pipeline.synthetic.signal import (
    DEFAULT_DRIFT,
    NO_DRIFT,
    ORACLE_COST_TICKS,
    ORACLE_ENTER_K,
    ORACLE_EXIT_K,
    ORACLE_FEE_PER_CONTRACT,
    ORACLE_HORIZON,
    OracleDay,
    bars_per_year,
    oracle_cost_ticks,
)

SIDECAR_SUFFIX = SIDECAR_SUFFIXES[0]
FORMAT_VERSION = 1
ORACLE_RULE = (
    f"long (short) when the oracle's expected {ORACLE_HORIZON}-bar move in ticks (it knows "
    "the latent drift, the AR(1) state and the coming bars' sigma) exceeds +(-) "
    f"{ORACLE_ENTER_K:g} x the one-way cost, flat when it falls back past "
    f"{ORACLE_EXIT_K:g} x cost; decided at the bar's close, held over the next bar, cost "
    "paid on every change; trades the latent spot (no rolls)"
)


def sidecar_path(dbn_path: str | os.PathLike[str]) -> Path:
    p = Path(dbn_path)
    return p.with_name(p.name + SIDECAR_SUFFIX)


def generator_config(
    roots: Sequence[str], schema: str, start: date, seed: int, random_walk: bool
) -> dict[str, Any]:
    """The parameters of one generate call, as the sidecar records them."""
    step = STEP_SECONDS[schema]
    drift = NO_DRIFT if random_walk else DEFAULT_DRIFT
    s, phi = drift.per_bar(step)
    return {
        "seed": int(seed),
        "run_start": start.isoformat(),
        "schema": schema,
        "bar_seconds": step,
        "roots": list(roots),
        "random_walk": bool(random_walk),
        "ar1_rho": 0.0 if random_walk else AR1_RHO,
        "drift": {
            "sd_per_minute": drift.sd_per_minute,
            "half_life_s": drift.half_life_s,
            "sd_per_bar": s,
            "phi_per_bar": phi,
        },
        "oracle": {
            "rule": ORACLE_RULE,
            "horizon_bars": ORACLE_HORIZON,
            "enter_k": ORACLE_ENTER_K,
            "exit_k": ORACLE_EXIT_K,
            "cost_ticks": ORACLE_COST_TICKS,
            "fee_per_contract": ORACLE_FEE_PER_CONTRACT,
            "one_way_cost_ticks": {r: oracle_cost_ticks(spec(r)) for r in roots},
            "bars_per_year": bars_per_year(step),
        },
    }


def write_sidecar(
    dbn_path: Path, day: date, config: Mapping[str, Any], oracle: Mapping[str, OracleDay]
) -> Path:
    """Land ``<dbn_path>.generator.json`` (after the DBN file, so a sidecar always describes
    a file that landed)."""
    path = sidecar_path(dbn_path)
    body = {
        "format_version": FORMAT_VERSION,
        "file": Path(dbn_path).name,
        "day": day.isoformat(),
        "generator": dict(config),
        "oracle_per_root": {r: o.to_json() for r, o in oracle.items()},
    }
    text = json.dumps(body, indent=2, sort_keys=True) + "\n"
    land(path, lambda tmp: tmp.write_text(text))
    return path


def read_sidecar(path: str | os.PathLike[str]) -> dict[str, Any]:
    """One sidecar, checked; the error names the file and the missing field."""
    p = path if isinstance(path, UPath) else UPath(path)
    try:
        body = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not a generator sidecar (invalid JSON: {e})") from e
    for key in ("format_version", "day", "generator", "oracle_per_root"):
        if key not in body:
            raise ValueError(f"{p}: generator sidecar lacks {key!r}")
    if body["format_version"] != FORMAT_VERSION:
        raise ValueError(f"{p}: sidecar format {body['format_version']}, expected {FORMAT_VERSION}")
    body["oracle_per_root"] = {
        r: OracleDay.from_json(d, f"{p} {r}") for r, d in body["oracle_per_root"].items()
    }
    return body


def oracle_summary(
    landing_dir: str | os.PathLike[str],
    *,
    start: date | None = None,
    end: date | None = None,
    roots: Sequence[str] | None = None,
) -> dict[str, Any] | None:
    """The oracle over the landed files of UTC days ``start .. end`` (inclusive; None: all),
    per root and pooled over roots (bars concatenated, as a pooled backtest), with the
    generator's parameters; None when no landed file in range has a sidecar (real data).

    Returns ``{"generator": [distinct configs], "days": [...], "files_without_sidecar":
    [...], "per_root": {root: stats}, "pooled": stats}``, stats as
    :meth:`.signal.OracleDay.summary` (``sharpe`` after costs, annualised; ``ic`` of the
    5-bar forecast; None where undefined)."""
    landing = landing_dir if isinstance(landing_dir, UPath) else UPath(landing_dir)
    configs: list[dict[str, Any]] = []
    days: list[str] = []
    missing: list[str] = []
    per_root: dict[str, OracleDay] = {}
    bpy: set[float] = set()
    for name in landed_file_names(landing):
        side = landing / (name + SIDECAR_SUFFIX)
        if not side.exists():
            missing.append(name)
            continue
        body = read_sidecar(side)
        day = date.fromisoformat(body["day"])
        if (start is not None and day < start) or (end is not None and day > end):
            continue
        if body["generator"] not in configs:
            configs.append(body["generator"])
        bpy.add(float(body["generator"]["oracle"]["bars_per_year"]))
        days.append(body["day"])
        for r, o in body["oracle_per_root"].items():
            if roots is None or r in roots:
                per_root[r] = per_root.get(r, OracleDay()) + o
    if not days:
        return None
    if len(bpy) != 1:
        raise ValueError(f"{landing}: sidecars mix bar sizes ({sorted(bpy)} bars/year)")
    (year,) = bpy
    pooled = sum(per_root.values(), OracleDay())
    return {
        "generator": configs,
        "days": sorted(days),
        "files_without_sidecar": missing,
        "per_root": {r: o.summary(year) for r, o in sorted(per_root.items())},
        "pooled": pooled.summary(year),
    }
