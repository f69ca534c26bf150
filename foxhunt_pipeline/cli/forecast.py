"""``foxhunt forecast``: the champion's forecasts of some trade dates, from the command line,
in seconds: no Dagster definitions are loaded (the forecast is the library call the
``champion_forecasts`` asset makes), and the Dagster instance is told afterwards, so the UI
shows the dates as materialized."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import date

from foxhunt_pipeline.config.paths import FoxhuntPaths

Echo = Callable[[str], None]


def _dates(have: list[date], first: date | None, last: date | None) -> list[date]:
    """The stored features dates in [first, last]; a single date asked for is kept even when
    it has none (so it is refused by name); neither bound: the newest."""
    if first is None and last is None:
        return have[-1:]
    if first is not None and last is not None and first == last:
        return [first]
    lo, hi = first or (have[0] if have else None), last or (have[-1] if have else None)
    return [d for d in have if lo is not None and hi is not None and lo <= d <= hi]


def run_forecast(paths: FoxhuntPaths, first: date | None, last: date | None,
                 echo: Echo = print) -> bool:
    """Forecast the dates with the overall champion; one line per date, then what the
    ``realised`` view holds for the champion's live dates. False if any date was refused."""
    import polars as pl

    from foxhunt_pipeline.forecasting.daily import forecast_date
    from foxhunt_pipeline.forecasting.freshness import ForecastRefused
    from foxhunt_pipeline.storage import forecast_views, object_store, trade_dates
    from resources.champion import current_champion
    from resources.mlflow_tracking import MLflowResource
    from resources.storage import FoxhuntStorage

    t0 = time.perf_counter()
    storage = FoxhuntStorage(home=str(paths.home))
    root = storage.warehouse_root
    champ = current_champion(storage, MLflowResource(home=str(paths.home)))
    if champ is None:
        echo("no overall champion yet (or it was demoted): materialize the models and the "
             "leaderboard first (foxhunt materialize)")
        return False
    days = _dates(trade_dates.stored_dates(root, "features"), first, last)
    if not days:
        echo(f"no trade date with features in {first or 'start'} .. {last or 'end'}")
        return False
    echo(f"champion {champ.ref.key} (live from {champ.live_start or '-'})")
    ok, done = True, []
    for day in days:
        t1 = time.perf_counter()
        try:
            result = forecast_date(root, day, champ.fm, champ.cost_by_root)
        except ForecastRefused as e:
            echo(f"[REFUSED] {e}")
            ok = False
            continue
        done.append(result)
        roots = ", ".join(f"{r} {n}" for r, n in result.per_root().items()) or "no decision bar"
        again = " (its earlier rows of the date replaced)" if result.replaced else ""
        echo(f"[ok] {day}: {result.rows.height} forecasts ({roots}){again} in "
             f"{time.perf_counter() - t1:.1f}s")
    object_store.refresh_duckdb_views(storage.duckdb_path, root)
    _tell_dagster(paths, done, champ.ref.key)
    if champ.live_start is not None:
        glob = {t: str(root / t / "trade_date=*" / "*.parquet") for t in
                (forecast_views.TABLE, "features")}
        real = forecast_views.realised_frame(glob[forecast_views.TABLE], glob["features"],
                                             champ.live_start, None,
                                             None if object_store.is_local(root) else root.fs)
        if real.height:
            per_day = (real.group_by("trade_date").agg(
                pl.len().alias("bars"), pl.col("pnl").is_not_null().sum().alias("realised"),
                pl.col("pnl").sum().alias("pnl")).sort("trade_date"))
            echo("realised so far (live dates; `foxhunt sql \"select * from realised\"`):")
            for d, n, k, pnl in per_day.iter_rows():
                echo(f"  {d}: {k}/{n} bars realised, net log return {pnl:+.5f}")
    echo(f"done in {time.perf_counter() - t0:.1f}s")
    return ok


def _tell_dagster(paths: FoxhuntPaths, done: list, champion: str) -> None:
    """Record the dates as materializations of ``champion_forecasts`` (runless events), so
    the Dagster UI's partitions show them; the drift and decay checks run with the assets."""
    import dagster as dg

    from foxhunt_pipeline.cli.instance import get_instance
    from foxhunt_pipeline.storage.trade_dates import partition_key_of

    if not done:
        return
    instance = get_instance(paths)
    try:
        for r in done:
            instance.report_runless_asset_event(dg.AssetMaterialization(
                asset_key="champion_forecasts", partition=partition_key_of(r.day),
                metadata={"champion": champion, "rows": dg.MetadataValue.int(r.rows.height),
                          "path": dg.MetadataValue.path(str(r.path)),
                          "made_by": "foxhunt forecast"}))
    finally:
        instance.dispose()
