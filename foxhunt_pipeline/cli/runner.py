"""Materialize on the persistent instance from the command line, so CLI runs show up in the
same UI, lineage and run history as sensor- and schedule-started runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import dagster as dg

from assets.common import WARNINGS
from assets.ingestion import HELD_BACK
from foxhunt_pipeline.automation import RANGE_END, RANGE_START
from foxhunt_pipeline.cli import quiet
from foxhunt_pipeline.cli.console import console_without_traces
from foxhunt_pipeline.cli.errors import project_error
from foxhunt_pipeline.cli.instance import get_instance
from foxhunt_pipeline.cli.orphans import fail_orphaned_runs, owner_tags
from foxhunt_pipeline.config.paths import FoxhuntPaths
from foxhunt_pipeline.config.settings import load_settings
from foxhunt_pipeline.ingest.file_runs import ingest_batches
from foxhunt_pipeline.ingest.landing import (
    PARTITIONS_NAME,
    landed_file_names,
    skipped_file_names,
    skipped_message,
    unregistered,
)
from foxhunt_pipeline.storage import continuous_dates
from foxhunt_pipeline.storage.continuous_dates import RUN_BREAK_DAYS
from foxhunt_pipeline.storage.object_store import is_local, landing_root, put_file, warehouse_root
from foxhunt_pipeline.storage.trade_dates import partition_key_of, stored_dates
from resources.storage import FoxhuntStorage

Echo = Callable[[str], None]
# the console logger of CLI runs (foxhunt_pipeline.cli.console): configured, so it is used
CLI_LOGGERS = {"loggers": {"console": {"config": {}}}}
#: groups that run only when named: a study is a deliberate (long) run, not part of "all"
NOT_BY_DEFAULT = ("tuning",)


def parse_selection(selection: list[str]):
    """Dagster selection strings; ``*`` / ``all`` is every asset but the groups that run only
    when named (``NOT_BY_DEFAULT``)."""
    everything = dg.AssetSelection.all() - dg.AssetSelection.groups(*NOT_BY_DEFAULT)
    sel = None
    for s in selection:
        part = everything if s in ("*", "all") else dg.AssetSelection.from_string(s)
        sel = part if sel is None else sel | part
    return sel


def register_landed_files(instance, paths: FoxhuntPaths) -> list[str]:
    """The same registration the landing sensor does, for runs started by hand."""
    new = unregistered(landing_root(home=paths.home), instance.get_dynamic_partitions(PARTITIONS_NAME))
    if new:
        instance.add_dynamic_partitions(PARTITIONS_NAME, new)
    return new


def skipped_landed_files(paths: FoxhuntPaths) -> list[str]:
    return skipped_file_names(landing_root(home=paths.home))


def materialize_selection(
    paths: FoxhuntPaths,
    selection: list[str],
    *,
    profile: str = "default",
    all_partitions: bool = False,
    date_from: date | None = None,
    date_to: date | None = None,
    echo: Echo = print,
    run_config: dict | None = None,
) -> bool:
    """Ingests the selected landed files in runs of up to ``INGEST_BATCH`` consecutive files
    (``ingest_batches``; a failing batch again one file per run), then the selected
    trade-date partitioned assets in one run per cluster of dates with data (``dated_ranges``),
    then the stored dates late data left stale, then the rest of the selection in one run
    (with ``run_config``), printing the leaderboard when that run built it. Each run's line is
    followed by its warnings. Returns False if any step or blocking check failed."""
    # lazy: the definitions load every asset module (torch, MLflow: seconds); `foxhunt ui`
    # and the other commands that use this module without materializing start without them
    from foxhunt_pipeline.definitions import defs

    if quiet.is_routed():
        quiet.route_library_output(paths.home)  # MLflow, imported with the definitions, set its own handler
    load_settings(profile=profile)  # run configs take their size defaults from it

    instance = get_instance(paths)
    _prepare(instance, paths, echo)
    graph = defs.resolve_asset_graph()
    keys = parse_selection(selection).resolve(graph)
    raw_key = dg.AssetKey("raw_bars")
    # failed steps log one line here; the summary below says why (traces: the event log)
    job = defs.resolve_implicit_global_asset_job_def().with_logger_defs({"console": console_without_traces})
    runs = _Runs(job, instance, {"foxhunt/started_by": "cli", "foxhunt/profile": profile, **owner_tags()}, echo)
    ok = True
    todo: list[str] = []
    if raw_key in keys:
        partitions = instance.get_dynamic_partitions(PARTITIONS_NAME)
        todo = partitions if all_partitions else _unmaterialized(instance, raw_key, partitions)
        ok &= _ingest(runs, raw_key, partitions, todo)
    dated, rest = _dated_and_rest(graph, keys, raw_key)
    if dated:
        spans = dated_ranges(instance, paths, dated, todo, all_partitions=all_partitions,
                             date_from=date_from, date_to=date_to)
        ok &= _materialize_dated(runs, paths, dated, spans, date_from, date_to)
    if rest:
        ok &= _materialize_rest(runs, paths, rest, run_config)
    if runs.held:
        echo(held_back_line(list(runs.held)))
    return ok


def held_back_line(held: list[str]) -> str:
    """The one line a script reads at the end: what was held back, and that the rest is stored."""
    return (f"held back (likely bad prints, not stored; see continuous_bars_price_jumps above): "
            f"{', '.join(held)}; every other root and date is stored")


def _dated_and_rest(graph, keys: set, raw_key) -> tuple[list, list]:
    """The selected assets after raw_bars, in dependency order: the trade-date partitioned
    ones and the others."""
    dated = [k for k in graph.toposorted_asset_keys
             if k in keys and k != raw_key and graph.get(k).partitions_def is not None]
    rest = [k for k in keys if k != raw_key and k not in dated]
    return dated, [k for k in graph.toposorted_asset_keys if k in set(rest)]


def _prepare(instance, paths: FoxhuntPaths, echo: Echo) -> None:
    """Before any run: fail what killed runs left, register the landed files the landing
    sensor has not seen and say which landed files are not ingested (wrong extension)."""
    recover(instance, paths, echo)
    new = register_landed_files(instance, paths)
    if new:
        echo(f"registered {len(new)} new landed file(s)")
    skipped = skipped_landed_files(paths)
    if skipped:
        echo(skipped_message(skipped))


@dataclass(frozen=True)
class _Runs:
    """What every run of one ``materialize_selection`` shares: the job, the instance, the
    tags and where the report lines go."""

    job: Any
    instance: Any
    tags: dict
    echo: Echo
    held: dict[str, None] = field(default_factory=dict)  # "ROOT DATE" held back by a check

    def execute(self, selection: list, *, tags: dict | None = None,
                run_config: dict | None = None, partition_key: str | None = None):
        """One in-process run of ``selection`` (errors reported, not raised)."""
        return self.job.execute_in_process(
            run_config=CLI_LOGGERS if run_config is None else run_config, instance=self.instance,
            asset_selection=selection, raise_on_error=False, tags={**self.tags, **(tags or {})},
            **({} if partition_key is None else {"partition_key": partition_key}))


def _ingest(runs: _Runs, raw_key, partitions: list[str], todo: list[str]) -> bool:
    """raw_bars of the ``todo`` landed files, a batch of consecutive files per run; a batch
    that fails is run again one file per run, so each file gets its own result."""
    def ingest_one(key: str) -> bool:
        t0 = time.perf_counter()
        res = runs.execute([raw_key], partition_key=key)
        return _report(res, f"raw_bars[{key}] ({todo.index(key) + 1}/{len(todo)})", t0, runs.echo)

    ok = True
    for batch in ingest_batches(partitions, todo):
        if len(batch) == 1:
            ok &= ingest_one(batch[0])
            continue
        t0 = time.perf_counter()
        res = runs.execute([raw_key], tags={RANGE_START: batch[0], RANGE_END: batch[-1]})
        if res.success:
            _report(res, f"raw_bars[{batch[0]} .. {batch[-1]}] ({len(batch)} files)", t0, runs.echo)
            continue
        runs.echo(f"[..] raw_bars: a file of {batch[0]} .. {batch[-1]} failed; ingesting them one by one")
        for key in batch:
            ok &= ingest_one(key)
    return ok


def _materialize_dated(runs: _Runs, paths: FoxhuntPaths, dated: list, spans: list[tuple[str, str]],
                       date_from: date | None, date_to: date | None) -> bool:
    """The trade-date partitioned assets over ``spans``, then the stored dates that late data
    which moved a roll left stale."""
    names = ", ".join(k.to_user_string() for k in dated)

    def run_spans(spans: list[tuple[str, str]]) -> bool:
        """One run per span: a hole in the data splits the dates into runs, so no run
        plans the empty partitions in between."""
        good = True
        for first, last in spans:
            t0 = time.perf_counter()
            res = runs.execute(dated, tags={RANGE_START: first, RANGE_END: last})
            good &= _report(res, f"{names} [{first} .. {last}]", t0, runs.echo, runs.held)
        return good

    ok = True
    if not spans and (date_from or date_to):
        runs.echo(f"{names}: no trade date with data in {date_from or 'start'} .. {date_to or 'end'}")
    elif not spans:
        runs.echo(f"{names}: every trade date is up to date")
    else:
        ok &= run_spans(spans)
    if dg.AssetKey("continuous_bars") in dated:
        # late data that moved a roll: the stored dates after it are rebuilt now, not left
        # inconsistent (at most twice: a rebuild moves no front, so it needs no third)
        for _ in range(2):
            stale = stale_spans(paths)
            if not stale:
                break
            runs.echo(f"late data moved the front of stored trade dates {stale[0][0]} .. {stale[-1][1]}: "
                      "rebuilding them")
            ok &= run_spans(stale)
    return ok


def _materialize_rest(runs: _Runs, paths: FoxhuntPaths, ordered: list,
                      run_config: dict | None) -> bool:
    """The unpartitioned assets in one run (with ``run_config``); the leaderboard printed
    when the run built it."""
    t0 = time.perf_counter()
    res = runs.execute(ordered, run_config={**CLI_LOGGERS, **(run_config or {})})
    ok = _report(res, ", ".join(k.to_user_string() for k in ordered), t0, runs.echo)
    if dg.AssetKey(LEADERBOARD) in ordered and _materialized(res, LEADERBOARD):
        runs.echo("")
        runs.echo(leaderboard_text(paths))
    return ok


LEADERBOARD = "model_leaderboard"


def _materialized(result, asset: str) -> bool:
    return any(e.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION
               and e.asset_key == dg.AssetKey(asset) for e in result.all_events)


def stale_spans(paths: FoxhuntPaths) -> list[tuple[str, str]]:
    """Partition ranges of the stored dates whose front late data moved (none: [])."""
    root = warehouse_root(home=paths.home)
    return continuous_dates.rebuild_spans(root, continuous_dates.stale_dates(root))


def recover(instance, paths: FoxhuntPaths, echo: Echo = print) -> None:
    """What a killed process left: its runs are marked failed, its temp files removed."""
    for run_id in fail_orphaned_runs(instance):
        echo(f"run {run_id[:8]} was left unfinished by a process that is gone: marked failed")
    removed = FoxhuntStorage(home=str(paths.home)).sweep(force=True)
    if removed:
        echo(f"removed {len(removed)} temporary file(s) left by killed runs")


def dated_ranges(instance, paths: FoxhuntPaths, dated: list, ingested: list[str], *,
                 all_partitions: bool, date_from: date | None, date_to: date | None
                 ) -> list[tuple[str, str]]:
    """(first, last) partition keys to rebuild, one range per cluster of trade dates with
    data (``continuous_dates.rebuild_spans``): the dates with data or stored in --from/--to
    when given, else every such date when ``all_partitions``, else the dates the ingested
    files hold, the dates with raw data never materialized and the dates late data left
    stale, each cluster widened by the stored date before it (its last targets need the new
    date's first bars). Empty when nothing needs a rebuild."""
    root = warehouse_root(home=paths.home)
    have = continuous_dates.all_dates(root)
    if date_from is not None or date_to is not None:
        known = sorted({*have, *stored_dates(root, continuous_dates.TABLE)})
        lo = date_from or (known[0] if known else None)
        hi = date_to or (known[-1] if known else None)
        if lo is None or hi is None or lo > hi:
            return []
        inside = [d for d in known if lo <= d <= hi]
        return [(partition_key_of(a), partition_key_of(b))
                for a, b in _date_clusters(inside)] if inside else []
    if all_partitions:
        wanted = set(have)
    else:
        wanted = set(continuous_dates.touched_dates(root, ingested)) | set(continuous_dates.stale_dates(root))
        for key in dated:
            done = instance.get_materialized_partitions(key)
            wanted |= {d for d in have if partition_key_of(d) not in done}
    return continuous_dates.rebuild_spans(root, wanted)


def _date_clusters(days: list[date]) -> list[tuple[date, date]]:
    out: list[tuple[date, date]] = []
    for d in sorted(days):
        if out and (d - out[-1][1]).days <= RUN_BREAK_DAYS:
            out[-1] = (out[-1][0], d)
        else:
            out.append((d, d))
    return out


def _unmaterialized(instance, key, partitions: list[str]) -> list[str]:
    done = instance.get_materialized_partitions(key)
    return [p for p in partitions if p not in done]


def _report(result, label: str, t0: float, echo: Echo, held: dict[str, None] | None = None) -> bool:
    """One line per run, then what failed: each failed check with its reason and first
    failing rows, each failed step with the project's own error (not Dagster's wrapper,
    not the innermost library exception). The (root, date) pairs a check held back are
    added to ``held``."""
    evaluations = [e.event_specific_data for e in result.all_events
                   if e.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION
                   and not e.event_specific_data.passed]
    if held is not None:
        for c in evaluations:
            line = getattr((c.metadata or {}).get(HELD_BACK), "value", None)
            held.update(dict.fromkeys(x.strip() for x in str(line or "").split(",") if x.strip()))
    # a WARN check (e.g. continuous_bars_price_jumps) is reported, but does not fail the run
    failed_checks = [c for c in evaluations if c.severity == dg.AssetCheckSeverity.ERROR]
    warnings = [c for c in evaluations if c.severity != dg.AssetCheckSeverity.ERROR]
    ok = result.success and not failed_checks
    status = "ok" if ok else "FAILED"
    said = run_warnings(result)
    extra = f"; failed checks: {', '.join(c.check_name for c in failed_checks)}" if failed_checks else ""
    extra += f"; warnings: {', '.join(c.check_name for c in warnings)}" if warnings else ""
    checked = [_check_line(c) for c in (failed_checks + warnings)[:5]]
    extra += "".join(f"\n    {line}" for line in checked)
    said = [w for w in said if not any(" ".join(w.split())[:200] in line for line in checked)]
    if not result.success:
        errs = [
            f"{e.step_key}: {project_error(e.event_specific_data.error)}"
            for e in result.all_events
            if e.event_type == dg.DagsterEventType.STEP_FAILURE and e.event_specific_data.error
        ]
        extra += "".join(f"\n    {m}" for m in errs[:5])
    extra += "".join(f"\n    warning: {w}" for w in said[:MAX_WARNINGS])
    if len(said) > MAX_WARNINGS:
        extra += (f"\n    ... and {len(said) - MAX_WARNINGS} more warnings: see the assets' "
                  "`warnings` metadata (foxhunt ui)")
    echo(f"[{status}] {label} in {time.perf_counter() - t0:.1f}s (run {result.run_id[:8]}){extra}")
    return ok


#: warning lines printed under one run's summary line (the rest: the assets' metadata)
MAX_WARNINGS = 20


def run_warnings(result) -> list[str]:
    """The ``warnings`` metadata of every asset the run materialized, in order, once each."""
    said: dict[str, None] = {}
    for e in result.all_events:
        if e.event_type != dg.DagsterEventType.ASSET_MATERIALIZATION:
            continue
        entry = e.event_specific_data.materialization.metadata.get(WARNINGS)
        for line in getattr(entry, "value", None) or []:
            said.setdefault(str(line), None)
    return list(said)


def _check_line(evaluation, limit: int = 400) -> str:
    """``<asset>.<check>: <reason with the first failing rows>`` from the check's metadata."""
    meta = evaluation.metadata or {}
    reason = getattr(meta.get("message"), "value", None) or evaluation.description or "failed"
    reason = " ".join(str(reason).split())
    if len(reason) > limit:
        reason = reason[:limit] + " ..."
    return f"{evaluation.asset_key.to_user_string()}.{evaluation.check_name}: {reason}"


def run_demo(paths: FoxhuntPaths, *, days: int, fast: bool, seed: int, echo: Echo = print) -> bool:
    """Fresh data if the landing zone is empty, the whole graph, then the leaderboard."""
    # lazy: the generator takes seconds to import and only the demo needs it
    from foxhunt_pipeline.synthetic.generate import generate

    t0 = time.perf_counter()
    landing = landing_root(home=paths.home)
    if not landed_file_names(landing):
        out = Path(landing.path) if is_local(landing) else paths.home / "scratch" / "generated"
        written = generate(out, days=days, roots=("ES", "ZN"), schema="ohlcv-1m", seed=seed)
        if not is_local(landing):
            for f in written:
                put_file(f, landing / Path(f).name)
        echo(f"generated {len(written)} DBN files in {landing}")
    else:
        echo(f"using the files already landed in {landing}")
    # no hyperparameter study: the demo trains with the profile's sizes (and a study's best
    # params if one was run before); `foxhunt tune` runs studies on demand
    # the leaderboard is printed by materialize_selection when its run materialized it
    ok = materialize_selection(paths, ["*"], profile="fast" if fast else "demo", echo=echo)
    echo("")
    echo(f"demo finished in {time.perf_counter() - t0:.0f}s: {'all steps passed' if ok else 'SOME STEPS FAILED'}")
    echo("Where to look:")
    echo(f"  Dagster UI : foxhunt ui --home {paths.home}   (http://127.0.0.1:3000)")
    echo("  MLflow UI  : started by foxhunt ui next to it   (http://127.0.0.1:3001)")
    echo(f"  DuckDB     : foxhunt sql --home {paths.home} \"select model, precision, sharpe from model_evaluations\"")
    return ok


def leaderboard_text(paths: FoxhuntPaths) -> str:
    path = warehouse_root(home=paths.home) / "model_leaderboard" / "leaderboard.md"
    if path.is_file():
        return path.read_text()
    return "(no leaderboard yet: model_leaderboard was not materialized)"
