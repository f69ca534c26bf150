"""Features of some trade dates, equal to the same dates of a full rebuild.

Every feature is computed within one (root, contract_seq) segment and looks only back,
except the targets, which look ``horizon`` bars ahead within the segment. So the features
of dates [start, end] of a root are those of its segment read from the segment's first
date (the warm-up, however long: EWMs have unbounded memory) up to the segment's next date
after ``end`` (the targets of ``end``'s last bars), cut back to [start, end]. The segment
starts come from the fronts table (``storage.continuous_dates``). Memory is one root's
segment, whatever the length of the history.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date

import polars as pl
from upath import UPath

from foxhunt_pipeline.features.build import ShortStretch, _root_features, check_continuous
from foxhunt_pipeline.features.grid import trade_date_expr
from foxhunt_pipeline.features.library import FeatureConfig
from foxhunt_pipeline.instruments.specs import spec
from foxhunt_pipeline.storage import continuous_dates, trade_dates

TABLE = "features"


def segment_spans(fronts: pl.DataFrame, start: date, end: date) -> list[tuple[str, int, date, date]]:
    """(root, contract_seq, first date to read, last date to read) of every segment that
    trades in [start, end]."""
    spans = []
    for (root, seq), g in fronts.group_by("root", "contract_seq"):
        days = g["day"]
        if not ((days >= start) & (days <= end)).any():
            continue
        after = days.filter(days > end)
        spans.append((root, int(seq), days.min(), after.min() if after.len() else end))
    return sorted(spans)


def feature_dates(root: UPath, start: date, end: date, cfg: FeatureConfig | None = None,
                  validate: Callable[[pl.DataFrame], bool] | None = None,
                  short: list[ShortStretch] | None = None,
                  ) -> Iterator[tuple[str, pl.DataFrame, bool]]:
    """(root, features rows of that root's dates in [start, end], passed), one segment at a
    time. ``validate`` sees the whole stretch computed (from the segment's first date to
    the date after ``end``): the contract's rule that targets are null only at the end of
    the data holds there, not on a range cut out of a longer segment. Stretches of those
    dates too short for the warm-up are appended to ``short``."""
    cfg = cfg or FeatureConfig()
    fronts = continuous_dates.read_fronts(root)
    for r, seq, first, last in segment_spans(fronts, start, end):
        spec(r)  # unknown roots fail here, by name
        bars = trade_dates.read_dates(
            root, continuous_dates.TABLE, first, last,
            where=(pl.col("root") == r) & (pl.col("contract_seq") == seq),
        )
        if bars is None or bars.is_empty():
            continue
        found: list[ShortStretch] = []
        out = _root_features(check_continuous(bars), r, cfg, found)
        if short is not None:
            short += [s for s in found if s.last >= start and s.first <= end]
        if out is None:
            continue
        passed = validate is None or validate(out)
        out = out.filter(trade_date_expr().is_between(start, end))
        if out.height:
            yield r, out, passed


@dataclass
class FeatureBuild:
    """What a build of some dates wrote (rows per date) and the warnings a person should
    read, each with the trade date it is about."""

    rows: dict[date, int] = field(default_factory=dict)
    notes: list[tuple[date, str]] = field(default_factory=list)

    def warnings_of(self, first: date, last: date) -> list[str]:
        return [text for day, text in self.notes if first <= day <= last]


def short_notes(short: list[ShortStretch], warmup: int, start: date, end: date) -> list[tuple[date, str]]:
    """One warning per root whose stretches in [start, end] were too short to give features."""
    out = []
    for root in sorted({s.root for s in short}):
        mine = sorted((s for s in short if s.root == root), key=lambda s: s.first)
        lo, hi = max(mine[0].first, start), min(mine[-1].last, end)
        listed = "; ".join(f"{s.symbol} {s.first} .. {s.last}: {s.bars} bars" for s in mine[:4])
        more = f"; and {len(mine) - 4} more" if len(mine) > 4 else ""
        out.append((lo, f"features {lo} .. {hi}: {root} has no features on the dates of {len(mine)} "
                        f"contract stretch(es) shorter than the {warmup}-bar warm-up ({listed}{more}); "
                        f"land more of {root}'s sessions around them to get features there"))
    return out


def build_dates(root: UPath, start: date, end: date, cfg: FeatureConfig | None = None,
                validate=None) -> FeatureBuild:
    """Write ``features/trade_date=D/root=R.parquet`` for every date D in [start, end];
    ``validate(frame) -> bool`` may veto a segment's rows (those dates keep their previous
    version). Returns the rows written per date and the warnings (stretches too short for
    the warm-up)."""
    cfg = cfg or FeatureConfig()
    build = FeatureBuild()
    written: dict[date, list[str]] = {}
    vetoed: set[date] = set()
    short: list[ShortStretch] = []
    for r, frame, passed in feature_dates(root, start, end, cfg, validate, short):
        framed = frame.with_columns(_d=trade_date_expr())
        if not passed:
            vetoed |= set(framed["_d"].unique().to_list())
            continue
        for (day,), part in framed.partition_by("_d", as_dict=True, maintain_order=True).items():
            trade_dates.write_part(root, TABLE, day, part.drop("_d"), part=f"root={r}")
            written.setdefault(day, []).append(f"root={r}")
            build.rows[day] = build.rows.get(day, 0) + part.height
    for day in trade_dates.stored_dates(root, TABLE):
        if start <= day <= end and day not in vetoed:
            trade_dates.replace_date(root, TABLE, day, written.get(day, []))
    build.notes += short_notes(short, cfg.warmup_bars, start, end)
    return build


__all__ = ["FeatureBuild", "build_dates", "feature_dates", "segment_spans", "short_notes"]
