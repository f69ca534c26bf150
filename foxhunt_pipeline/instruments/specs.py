"""CME futures contract facts that every layer needs: symbols, expiries, tick values.

One table so the generator, the roll logic, the static model inputs and the
backtest's costs agree on what a contract is.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date, timedelta

MONTH_CODES = "FGHJKMNQUVXZ"  # Jan..Dec
_OUTRIGHT = re.compile(r"^(?P<root>[A-Z0-9]{1,3}?)(?P<month>[FGHJKMNQUVXZ])(?P<year>\d{1,2})$")


@dataclass(frozen=True)
class RootSpec:
    root: str
    name: str
    asset_class: str  # equity_index, rates, energy, metals
    tick_size: float
    multiplier: float  # currency per 1.0 of price
    contract_months: str  # month codes listed
    expiry_rule: str  # third_friday, treasury, energy, metals
    price_level: float  # typical price, for the generator
    daily_volume: float  # typical front-month contracts per day
    daily_vol: float  # typical daily log-return std
    asset_class_id: int
    root_id: int

    @property
    def tick_value(self) -> float:
        return self.tick_size * self.multiplier


ROOTS: dict[str, RootSpec] = {
    s.root: s
    for s in (
        RootSpec("ES", "E-mini S&P 500", "equity_index", 0.25, 50.0, "HMUZ", "third_friday", 4800.0, 1_500_000, 0.011, 0, 0),
        RootSpec("NQ", "E-mini Nasdaq-100", "equity_index", 0.25, 20.0, "HMUZ", "third_friday", 17000.0, 600_000, 0.014, 0, 1),
        RootSpec("ZN", "10-Year T-Note", "rates", 1 / 64, 1000.0, "HMUZ", "treasury", 110.0, 1_300_000, 0.004, 1, 2),
        RootSpec("CL", "Crude Oil", "energy", 0.01, 1000.0, "FGHJKMNQUVXZ", "energy", 75.0, 350_000, 0.022, 2, 3),
        RootSpec("GC", "Gold", "metals", 0.10, 100.0, "GJMQVZ", "metals", 2050.0, 200_000, 0.009, 3, 4),
    )
}


def spec(root: str) -> RootSpec:
    try:
        return ROOTS[root]
    except KeyError:
        raise KeyError(f"unknown futures root {root!r}; known roots: {', '.join(ROOTS)}") from None


def contract_symbol(root: str, year: int, month: int) -> str:
    """Databento raw symbol, e.g. ``ESH4`` (one-digit year, as GLBX.MDP3 uses)."""
    return f"{root}{MONTH_CODES[month - 1]}{year % 10}"


def spread_symbol(front: str, back: str) -> str:
    return f"{front}-{back}"


def is_spread(symbol: str) -> bool:
    """Calendar spreads and other combos carry a dash or a space (``ESH4-ESM4``, ``UD:...``)."""
    return "-" in symbol or " " in symbol or ":" in symbol


def parse_outright(symbol: str, ref: date) -> tuple[str, int, int] | None:
    """(root, year, month) of an outright, resolving the one-digit year to the decade
    that puts the expiry closest after ``ref`` minus a year; None for non-outrights."""
    if is_spread(symbol):
        return None
    m = _OUTRIGHT.match(symbol)
    if not m:
        return None
    root = m["root"]
    month = MONTH_CODES.index(m["month"]) + 1
    digits = m["year"]
    if len(digits) == 2:
        return root, 2000 + int(digits), month
    base = ref.year - ref.year % 10 + int(digits)
    candidates = [base - 10, base, base + 10]
    year = min(candidates, key=lambda y: abs((date(y, month, 15) - ref).days - 180))
    return root, year, month


def _third_friday(year: int, month: int) -> date:
    first = date(year, month, 1)
    offset = (4 - first.weekday()) % 7
    return first + timedelta(days=offset + 14)


def _business_days_back(d: date, n: int) -> date:
    while n > 0:
        d -= timedelta(days=1)
        if d.weekday() < 5:
            n -= 1
    return d


def _last_business_day(year: int, month: int) -> date:
    d = date(year, month, calendar.monthrange(year, month)[1])
    while d.weekday() >= 5:
        d -= timedelta(days=1)
    return d


def expiry_date(root: str, year: int, month: int) -> date:
    """Last trading day, by the root's rule (weekends only; exchange holidays ignored)."""
    rule = spec(root).expiry_rule
    if rule == "third_friday":
        return _third_friday(year, month)
    if rule == "treasury":  # seventh business day before the last business day
        return _business_days_back(_last_business_day(year, month), 7)
    if rule == "energy":  # three business days before the 25th of the prior month
        py, pm = (year, month - 1) if month > 1 else (year - 1, 12)
        d = date(py, pm, 25)
        if d.weekday() >= 5:
            d = _business_days_back(d, 1)
        return _business_days_back(d, 3)
    if rule == "metals":  # third-last business day of the month
        return _business_days_back(_last_business_day(year, month), 2)
    raise ValueError(f"unknown expiry rule {rule!r} for root {root}")


def listed_contracts(root: str, start: date, end: date, extra: int = 2) -> list[tuple[int, int]]:
    """(year, month) of contracts trading between ``start`` and ``end``, front first,
    plus ``extra`` deferred contracts beyond the last front."""
    months = [MONTH_CODES.index(c) + 1 for c in spec(root).contract_months]
    out: list[tuple[int, int]] = []
    y = start.year - 1
    while True:
        for m in months:
            exp = expiry_date(root, y, m)
            if exp >= start:
                out.append((y, m))
        if out and expiry_date(root, *out[-1]) > end and len([c for c in out if expiry_date(root, *c) > end]) > extra:
            break
        y += 1
    return out
