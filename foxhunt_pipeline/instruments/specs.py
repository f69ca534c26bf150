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
    asset_class: str  # equity_index, rates, energy, metals, fx, agriculture
    tick_size: float  # minimum price increment of an outright, in the price's own unit
    multiplier: float  # currency per 1.0 of price (the point value)
    contract_months: str  # month codes of the contracts that carry the volume
    expiry_rule: str  # see expiry_date
    price_level: float  # typical price, for the generator and as a cost fallback
    daily_volume: float  # typical front-month contracts per day
    daily_vol: float  # typical daily log-return std
    asset_class_id: int
    root_id: int  # stable: static model inputs and synthetic instrument ids use it
    calendar: str = ""  # pandas_market_calendars name (holidays, early closes)
    quiet_minutes: int = 0  # longest normal no-trade gap inside a session (0: its class's)

    @property
    def tick_value(self) -> float:
        return self.tick_size * self.multiplier


ASSET_CLASS_IDS = {
    "equity_index": 0, "rates": 1, "energy": 2, "metals": 3, "fx": 4, "agriculture": 5,
}
CALENDAR_OF_CLASS = {
    "equity_index": "CME_Equity",
    "rates": "CME_Bond",
    "energy": "CMEGlobex_Energy",
    "metals": "CMEGlobex_Metals",
    "fx": "CMEGlobex_FX",
    "agriculture": "CMEGlobex_Grains",
}


#: the longest stretch of open market a root normally goes without a trade on minute bars
#: (Databento omits such minutes): longer is a hole in the data (``instruments.sessions``).
#: Liquid CME futures trade every few minutes around the clock, so their day session has no
#: silent 30 minutes; grains trade thinly overnight.
QUIET_MINUTES_OF_CLASS = {
    "equity_index": 30, "rates": 30, "energy": 30, "metals": 30, "fx": 30, "agriculture": 60,
}


def _root(root: str, name: str, asset_class: str, tick: float, multiplier: float, months: str,
          rule: str, price: float, volume: float, vol: float, root_id: int) -> RootSpec:
    return RootSpec(root, name, asset_class, tick, multiplier, months, rule, price, volume, vol,
                    ASSET_CLASS_IDS[asset_class], root_id, CALENDAR_OF_CLASS[asset_class])


_Q = "HMUZ"  # quarterly cycle
_ALL = "FGHJKMNQUVXZ"
# CME contract specifications (cmegroup.com, "Contract Specs" of each product): tick is the
# outright minimum fluctuation, multiplier the contract unit; prices as GLBX.MDP3 gives
# them (grains in cents per bushel, FX in USD per unit of the foreign currency). The
# typical price / volume / volatility are rough 2024 levels, for the generator only.
# root_id: never renumber a root (models and synthetic ids depend on it); append new ones.
ROOTS: dict[str, RootSpec] = {
    s.root: s
    for s in (
        # equity index: third Friday of the contract month
        _root("ES", "E-mini S&P 500", "equity_index", 0.25, 50.0, _Q, "third_friday", 4800.0, 1_500_000, 0.011, 0),
        _root("NQ", "E-mini Nasdaq-100", "equity_index", 0.25, 20.0, _Q, "third_friday", 17000.0, 600_000, 0.014, 1),
        _root("RTY", "E-mini Russell 2000", "equity_index", 0.10, 50.0, _Q, "third_friday", 2000.0, 150_000, 0.015, 5),
        _root("YM", "E-mini Dow ($5)", "equity_index", 1.0, 5.0, _Q, "third_friday", 38000.0, 150_000, 0.010, 6),
        _root("MES", "Micro E-mini S&P 500", "equity_index", 0.25, 5.0, _Q, "third_friday", 4800.0, 1_200_000, 0.011, 7),
        _root("MNQ", "Micro E-mini Nasdaq-100", "equity_index", 0.25, 2.0, _Q, "third_friday", 17000.0, 800_000, 0.014, 8),
        # rates: ZN/ZB/UB 7th business day before the month's last; ZT/ZF its last business day
        _root("ZN", "10-Year T-Note", "rates", 1 / 64, 1000.0, _Q, "treasury", 110.0, 1_300_000, 0.004, 2),
        _root("ZB", "U.S. Treasury Bond", "rates", 1 / 32, 1000.0, _Q, "treasury", 118.0, 350_000, 0.008, 9),
        _root("UB", "Ultra U.S. Treasury Bond", "rates", 1 / 32, 1000.0, _Q, "treasury", 125.0, 200_000, 0.010, 10),
        _root("ZF", "5-Year T-Note", "rates", 1 / 128, 1000.0, _Q, "treasury_month_end", 106.0, 700_000, 0.003, 11),
        _root("ZT", "2-Year T-Note", "rates", 1 / 256, 2000.0, _Q, "treasury_month_end", 102.0, 400_000, 0.0012, 12),
        # energy
        _root("CL", "Crude Oil", "energy", 0.01, 1000.0, _ALL, "energy", 75.0, 350_000, 0.022, 3),
        _root("NG", "Henry Hub Natural Gas", "energy", 0.001, 10_000.0, _ALL, "natural_gas", 2.5, 150_000, 0.035, 13),
        _root("RB", "RBOB Gasoline", "energy", 0.0001, 42_000.0, _ALL, "prior_month_end", 2.3, 60_000, 0.022, 14),
        _root("HO", "NY Harbor ULSD", "energy", 0.0001, 42_000.0, _ALL, "prior_month_end", 2.6, 60_000, 0.022, 15),
        # metals: third-last business day of the contract month
        _root("GC", "Gold", "metals", 0.10, 100.0, "GJMQVZ", "metals", 2050.0, 200_000, 0.009, 4),
        _root("SI", "Silver", "metals", 0.005, 5000.0, "HKNUZ", "metals", 23.0, 60_000, 0.017, 16),
        _root("HG", "Copper", "metals", 0.0005, 25_000.0, "HKNUZ", "metals", 3.9, 80_000, 0.013, 17),
        # FX: two business days before the third Wednesday (6C: one)
        _root("6E", "Euro FX", "fx", 0.00005, 125_000.0, _Q, "fx", 1.09, 200_000, 0.005, 18),
        _root("6J", "Japanese Yen", "fx", 0.0000005, 12_500_000.0, _Q, "fx", 0.0068, 120_000, 0.006, 19),
        _root("6B", "British Pound", "fx", 0.0001, 62_500.0, _Q, "fx", 1.27, 80_000, 0.005, 20),
        _root("6A", "Australian Dollar", "fx", 0.00005, 100_000.0, _Q, "fx", 0.66, 90_000, 0.007, 21),
        _root("6C", "Canadian Dollar", "fx", 0.00005, 100_000.0, _Q, "fx_cad", 0.74, 60_000, 0.004, 22),
        # grains (cents per bushel, 5,000 bushels): business day before the 15th
        _root("ZC", "Corn", "agriculture", 0.25, 50.0, "HKNUZ", "grains", 450.0, 200_000, 0.015, 23),
        _root("ZS", "Soybeans", "agriculture", 0.25, 50.0, "FHKNQUX", "grains", 1200.0, 120_000, 0.012, 24),
        _root("ZW", "Chicago SRW Wheat", "agriculture", 0.25, 50.0, "HKNUZ", "grains", 600.0, 80_000, 0.018, 25),
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
    if rule == "treasury_month_end":  # last business day of the contract month
        return _last_business_day(year, month)
    if rule == "natural_gas":  # three business days before the contract month's first day
        return _business_days_back(date(year, month, 1), 3)
    if rule == "prior_month_end":  # last business day of the month before the contract month
        return _business_days_back(date(year, month, 1), 1)
    if rule in ("fx", "fx_cad"):  # business days before the third Wednesday
        first = date(year, month, 1)
        third_wednesday = first + timedelta(days=(2 - first.weekday()) % 7 + 14)
        return _business_days_back(third_wednesday, 2 if rule == "fx" else 1)
    if rule == "grains":  # the business day before the 15th
        return _business_days_back(date(year, month, 15), 1)
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
