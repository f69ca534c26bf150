"""Which synthetic contract is which: stable instrument ids, last-trade instants and the
day each contract's volume rolls to the next, per the root's expiry rule.

Why a module of its own: the market simulator, the large benchmark file and anyone
reading the landed files must agree on ids and expiries, and none of it is random.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta

import numpy as np

from foxhunt_pipeline.instruments.specs import expiry_date, spec
from foxhunt_pipeline.synthetic.session import CHICAGO, NS

LAST_TRADE_CT = {
    "third_friday": time(8, 30),
    "treasury": time(12, 1),
    "energy": time(13, 30),
    "metals": time(12, 30),
}


def instrument_id_for(root: str, year: int, month: int, spread: bool = False) -> int:
    """Stable synthetic instrument_id: the same contract has the same id in every file."""
    return (
        100_000 + spec(root).root_id * 10_000 + (5_000 if spread else 0) + (year % 100) * 12 + month
    )


def ct_ns(d: date, t: time) -> int:
    """UTC ns of wall-clock time ``t`` on ``d`` in Chicago."""
    return int(datetime.combine(d, t, tzinfo=CHICAGO).timestamp()) * NS


def last_trade_ns(root: str, year: int, month: int) -> int:
    s = spec(root)
    return ct_ns(expiry_date(root, year, month), LAST_TRADE_CT.get(s.expiry_rule, time(16, 0)))


def roll_centre_ns(root: str, year: int, month: int) -> int:
    """Midday CT of the day the next contract's volume overtakes this one's."""
    s = spec(root)
    exp = expiry_date(root, year, month)
    if s.expiry_rule == "third_friday":
        d = exp - timedelta(days=8)
    elif s.expiry_rule == "energy":
        d = np.busday_offset(exp, -3, roll="backward").astype(date)
    else:  # treasury, metals: before first notice at the end of the month before delivery
        month_start = np.datetime64(date(year, month, 1))
        last_prior = np.busday_offset(month_start - np.timedelta64(1, "D"), 0, roll="backward")
        d = np.busday_offset(last_prior, -3, roll="backward").astype(date)
    return ct_ns(d, time(12, 0))
