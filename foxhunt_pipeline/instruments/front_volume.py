"""How much of its root's volume the front contract holds: a roll rule that starts a series
on the nearest expiry, or keeps a contract until a busier one has traded, can make a contract
nearly nobody traded the series for a while (GCV3 with 84 lots while GCZ3 traded 51,415).
That is said, not silently used."""

from __future__ import annotations

from datetime import date

import polars as pl

#: a front holding less than this share of its root's volume on its dates is reported
THIN_FRONT_SHARE = 0.1


def thin_fronts(daily: pl.DataFrame, fronts: pl.DataFrame, first: date, last: date,
                share: float = THIN_FRONT_SHARE) -> list[tuple[date, str]]:
    """(first date, warning) for each front that held less than ``share`` of its root's
    volume on dates in [first, last]: the roll chose (or kept) a contract nearly nobody
    traded, whose bars are then the series. One warning per segment, over its thin dates."""
    if fronts.is_empty():
        return []
    days = fronts.filter(pl.col("day").is_between(first, last))
    total = daily.group_by("root", "day").agg(pl.col("volume").sum().alias("total"))
    busiest = (daily.join(days.select("root", "day", "symbol"), on=["root", "day"], suffix="_front")
               .filter(pl.col("symbol") != pl.col("symbol_front"))
               .sort("volume", descending=True).group_by("root", "day", maintain_order=True).first()
               .select("root", "day", pl.col("symbol").alias("busiest"), pl.col("volume").alias("busiest_volume")))
    thin = (days.join(daily, on=["root", "day", "symbol"], how="left")
            .join(total, on=["root", "day"], how="left")
            .with_columns(pl.col("volume", "total").fill_null(0))
            .filter(pl.col("volume").cast(pl.Float64) < share * pl.col("total").cast(pl.Float64))
            .join(busiest, on=["root", "day"], how="left"))
    out = []
    for (root, _seq), g in thin.sort("day").group_by("root", "contract_seq", maintain_order=True):
        vol, tot = int(g["volume"].sum()), max(int(g["total"].sum()), 1)
        top = g.sort("busiest_volume", descending=True, nulls_last=True).row(0, named=True)
        lo, hi = g["day"].min(), g["day"].max()
        out.append((lo, f"continuous_bars {lo} .. {hi}: {root} front {g['symbol'][0]} traded {vol:,} lots "
                        f"on {g.height} date(s), {100 * vol / tot:.1f}% of {root}'s volume there "
                        f"({top['busiest']}: {int(top['busiest_volume'] or 0):,} on {top['day']}): a thin "
                        "contract is the series there (a root's first front is the nearest expiry; a "
                        "roll moves the session after a busier contract trades)"))
    return out


__all__ = ["THIN_FRONT_SHARE", "thin_fronts"]
