"""The DuckDB views over the champion's forecasts, computed on read: nothing to keep current.

* ``all_forecasts``: every stored row of ``champion_forecasts`` (one parquet file per trade
  date and model version: a new champion writes its own rows beside the old ones).
* ``forecasts``: per trade date, the rows of the version that forecast it first: the one that
  was champion when the date was made (a later champion's re-forecast never replaces them).
* ``realised``: ``forecasts`` joined to the ``features`` targets of the same bar as they
  arrive (NULL until the horizon's bars exist): ``realised_return`` over the decision
  horizon, ``pnl`` (the position held over the next bar times its log return, less the
  one-way cost of every position change, a roll charged as an exit and an entry: the
  backtest's rule) and ``pinball`` (the mean pinball loss over every horizon and quantile,
  log-return units; NULL for an agent or until all horizons are realised).

One SQL definition serves the catalogue (``foxhunt sql``) and the library
(``realised_frame``), so the numbers a person reads are the ones the checks act on.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Any

import duckdb
import polars as pl

TABLE = "champion_forecasts"
VIEWS = ("all_forecasts", "forecasts", "realised")
_QUANTILE = re.compile(r"^h(\d+)_q(\d+(?:\.\d+)?)$")
_TARGET = re.compile(r"^y_(\d+)$")


def _read(source: str) -> str:
    quoted = "'" + source.replace("'", "''") + "'"
    return f"read_parquet({quoted}, hive_partitioning=false, union_by_name=true)"


def _columns(con: Any, source: str) -> list[str]:
    return [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {_read(source)}").fetchall()]


def pinball_sql(quantile_columns: list[str], target_columns: list[str]) -> str:
    """Mean pinball loss of the ``h<k>_q<p>`` columns against ``y_<k>`` (NULL when a horizon is
    not realised yet, or when there are no quantiles)."""
    targets = {int(m.group(1)) for c in target_columns if (m := _TARGET.match(c))}
    terms = []
    for c in quantile_columns:
        m = _QUANTILE.match(c)
        if m is None or int(m.group(1)) not in targets:
            continue
        q = float(m.group(2)) / 100.0
        err = f'(y.y_{int(m.group(1))} - f."{c}")'
        terms.append(f"greatest({q!r} * {err}, {q - 1.0!r} * {err})")
    if not terms:
        return "CAST(NULL AS DOUBLE)"
    return f"({' + '.join(terms)}) / {len(terms)}"


def view_sql(name: str, forecasts_source: str, features_source: str | None, con: Any,
             temp: bool = False) -> str | None:
    """``CREATE VIEW`` of one of ``VIEWS`` over the parquet globs (``None``: ``realised``
    without a features table)."""
    head = f"CREATE OR REPLACE {'TEMP ' if temp else ''}VIEW {name} AS "
    if name == "all_forecasts":
        return head + f"SELECT * FROM {_read(forecasts_source)}"
    first_made = (f"SELECT * FROM {_read(forecasts_source)} "
                  "QUALIFY made_at = min(made_at) OVER (PARTITION BY trade_date)")
    if name == "forecasts":
        return head + first_made
    if name != "realised":
        raise ValueError(f"unknown forecast view {name!r}; known: {', '.join(VIEWS)}")
    if features_source is None:
        return None
    targets = [c for c in _columns(con, features_source) if _TARGET.match(c)]
    if not targets:
        return None
    cols = _columns(con, forecasts_source)
    quantiles = [c for c in cols if _QUANTILE.match(c)]
    cases = " ".join(f"WHEN {int(c[2:])} THEN y.{c}" for c in targets)
    y_cols = ", ".join(f"y.{c} AS realised_{c[2:]}" for c in targets)
    prev = "lag(f.position) OVER w"
    change = (f"CASE WHEN lag(f.contract_seq) OVER w = f.contract_seq "
              f"THEN abs(f.position - {prev}) "
              f"ELSE abs(coalesce({prev}, 0)) + abs(f.position) END")
    return head + (
        f"SELECT f.*, {y_cols}, CASE f.decision_horizon {cases} END AS realised_return, "
        f"f.position * y.y_1 - f.cost * ({change}) AS pnl, "
        f"{pinball_sql(quantiles, targets)} AS pinball "
        f"FROM ({first_made}) f "
        f"LEFT JOIN (SELECT root, ts_event, {', '.join(targets)} FROM {_read(features_source)}) y "
        "USING (root, ts_event) WINDOW w AS (PARTITION BY f.root ORDER BY f.ts_event)")


def create_views(con: Any, forecasts_source: str, features_source: str | None,
                 temp: bool = False) -> list[str]:
    """Create the views on ``con``; returns their names."""
    made = []
    for name in VIEWS:
        sql = view_sql(name, forecasts_source, features_source, con, temp=temp)
        if sql is None:
            con.execute(f"DROP VIEW IF EXISTS {name}").fetchall()
            continue
        con.execute(sql).fetchall()
        made.append(name)
    return made


def realised_frame(forecasts_source: str, features_source: str,
                   first: date | None = None, last: date | None = None,
                   filesystem: Any = None) -> pl.DataFrame:
    """The ``realised`` view's rows of trade dates ``first`` .. ``last``, sorted by root and
    time (an in-memory DuckDB over the same globs: the catalogue is not touched)."""
    with duckdb.connect() as con:
        if filesystem is not None:
            con.register_filesystem(filesystem)
        if "realised" not in create_views(con, forecasts_source, features_source, temp=True):
            return pl.DataFrame()
        where = []
        if first is not None:
            where.append(f"trade_date >= DATE '{first.isoformat()}'")
        if last is not None:
            where.append(f"trade_date <= DATE '{last.isoformat()}'")
        sql = "SELECT * FROM realised" + (f" WHERE {' AND '.join(where)}" if where else "")
        out = pl.from_arrow(con.sql(sql + " ORDER BY root, ts_event").to_arrow_table())
        return out.with_columns(pl.col(pl.Datetime).dt.convert_time_zone("UTC"))


__all__ = ["TABLE", "VIEWS", "create_views", "pinball_sql", "realised_frame", "view_sql"]
