"""Which trade dates may be forecast now: a date's features must be stored, not stale, and
newer than its continuous bars, which must be newer than every landed file holding the date.

Why: a forecast made from features that a later file, a bad print held back or a moved roll
has left behind would be a forecast of data nobody sees any more; it is refused, and the
message names the date and what to rebuild.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

import polars as pl
from upath import UPath

from foxhunt_pipeline.storage import continuous_dates, trade_dates

FEATURES, CONTINUOUS = "features", "continuous_bars"


class ForecastRefused(ValueError):
    """A trade date that cannot be forecast now; the message names the date and why."""


class NoData(ForecastRefused):
    """No landed file holds the date (a weekend, a holiday, a date not landed yet)."""


def modified(path: UPath) -> float:
    """The modification time of a stored file (local or object store), UTC seconds."""
    info = path.fs.info(path.path)
    when = info.get("mtime") or info.get("LastModified") or info.get("created")
    if isinstance(when, datetime):
        return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    return float(when or 0.0)


def _rebuild(day: date) -> str:
    return (f"rebuild it with `foxhunt materialize continuous_bars features --from {day} "
            f"--to {day}`")


def refuse_unless_fresh(root: UPath, day: date) -> None:
    """Raise ``ForecastRefused`` unless ``day``'s features are there and current."""
    if day in continuous_dates.stale_dates(root):
        raise ForecastRefused(f"trade date {day}: stale, late data moved its front contract "
                              f"and it is not rebuilt yet; {_rebuild(day)}")
    features = trade_dates.date_parts(root, FEATURES).get(day)
    continuous = trade_dates.date_parts(root, CONTINUOUS).get(day)
    raw = continuous_dates.raw_date_index(root).filter(
        pl.col("trade_date") == day)
    if not features:
        if continuous:
            why = ("its continuous_bars are stored but its features are not (not built yet, or "
                   "the features_contract check failed)")
        elif raw.height:
            why = ("held back: landed files hold it but its continuous_bars were not stored "
                   "(continuous_bars_price_jumps flagged a likely bad print, or it is not built "
                   "yet)")
        else:
            raise NoData(f"trade date {day}: no landed file holds it")
        raise ForecastRefused(f"trade date {day}: {why}; {_rebuild(day)}")
    built = min(modified(p) for p in features)
    if continuous and max(modified(p) for p in continuous) > built:
        raise ForecastRefused(f"trade date {day}: its features are older than its "
                              f"continuous_bars (the features build failed or is pending); "
                              f"{_rebuild(day)}")
    stamp = max(modified(p) for p in continuous) if continuous else built
    newer = [s for s in raw["source"].to_list() if modified(UPath(s)) > stamp]
    if newer:
        names = ", ".join(UPath(s).parent.name.removeprefix("source_file=") for s in newer[:3])
        raise ForecastRefused(f"trade date {day}: held back, landed file(s) {names} hold it "
                              "and were ingested after it was built (continuous_bars_price_jumps "
                              f"flagged a likely bad print, or the rebuild is pending); "
                              f"{_rebuild(day)}")


__all__ = ["ForecastRefused", "NoData", "modified", "refuse_unless_fresh"]
