"""The synthetic market: one root's latent price, volatility, contracts, spreads and
volume, simulated bar by bar for the Globex minutes (or seconds) that trade.

The market, per root (all randomness from ``SeedSequence([seed, root_id,
bar_seconds, day])``, state carried day to day, so a longer run from the same
start reproduces a shorter one file for file):

* Session: Globex hours (:mod:`.synthetic_session`), bars only while open; full
  holidays and early closes follow the root's CME calendar. A bar is emitted only if
  it has trades, so quiet bars (overnight, deferred months, spreads) are omitted.
* Price: a latent "spot" S in ticks. Each bar moves it by an integer number of
  ticks k_t, drawn so that E[k_t**2] = x_t**2 and sign(k_t) = sign(x_t), with
  x_t = sigma_t * u_t (sigma_t in ticks).
  - sigma_t = daily_vol * S / sqrt(bars per session) * season(t) * exp(h_t),
    h_t the sum of two Gaussian AR(1) log-vol factors (half-lives of one
    session and 30 minutes): volatility clustering. The first bar after the
    daily halt or the weekend carries an extra gap variance.
  - z_t: Student-t with 4 degrees of freedom scaled to unit variance (fat
    tails).
* THE PREDICTABLE COMPONENTS (the only ones), both in the unit-variance
  innovation u_t = a_t + sqrt(1 - s**2) * v_t, so sigma_t stays the return's sd:
  - a latent drift a_t (:mod:`.signal`): a Gaussian AR(1) with a half-life of
    :data:`DRIFT_HALF_LIFE_S` = 30 minutes and a stationary sd of :data:`DRIFT_SD` =
    0.2 of a 1-minute bar's sigma (s = DRIFT_SD * sqrt(bar seconds / 60), so
    the same continuous-time process at any bar size). Unobserved, it shows only
    through past returns (momentum over tens of minutes): an oracle that knows
    it and trades the 5-bar expected return against 1 tick + fee per side
    stays profitable after costs; a model must estimate it from past bars.
  - v_t = rho * v_{t-1} + sqrt(1 - rho**2) * z_t with rho = :data:`AR1_RHO` =
    0.1, at the bar size of the schema. So consecutive one-bar close-to-close
    returns of an outright have a lag-1 autocorrelation of about +0.05 to +0.1
    (short-horizon momentum; lowest for contracts whose sigma is under a tick,
    e.g. ZN at 1 s), and two consecutive non-zero moves share their sign 57-64%
    of the time instead of 50%. Too weak alone to pay 1 tick of cost.
  Nothing else about the sign of future returns is knowable.
  ``random_walk=True`` sets rho = 0 and s = 0: every bar's sign is then
  i.i.d. symmetric and independent of all past prices, volumes and volatility,
  which keep exactly the same process (same seed: same sigma_t and |z_t|).
  Volatility and volume stay forecastable in magnitude, as in real markets.
  ``break_ns`` (``foxhunt generate --break-at``) does the same from one instant on, a
  regime change: from the first bar of that trade date a_t = 0 and v_t = z_t (same draws,
  so every bar before it is unchanged and after it the market is a random walk with the
  same volatility); the oracle then forecasts nothing.
  Each day's oracle statistics go to the file's sidecar (:mod:`.run_metadata`).
* Contracts: quarterly outrights. At any instant the first two unexpired
  contracts trade (expiry = last trade at 08:30 CT for equity index, 12:01 CT
  for treasuries). Contract c prices at S + O_c, O_c a per-contract offset
  that starts at the cost of carry to its expiry and moves +-1 tick a few times
  a session (symmetric, so still a martingale). Volume migrates to the next
  contract along a logistic centred on the roll date (8 calendar days before
  expiry for equity index; 3 business days before the end of the month before
  delivery for treasuries and metals; 3 business days before expiry for
  energy), each side keeping at least 1.5%.
* Calendar spreads ``FRONT-NEXT`` trade as their own instruments at O_front -
  O_next (negative for ES: contango), volume 0.2% of the root's, peaking
  around the roll.
* Volume: a session's ``daily_volume`` spread by a U-shaped intraday profile,
  scaled by the volatility state and |z_t|; trades ~ Poisson(volume / 4),
  bar volume = trades + Poisson(3 * trades).
* OHLC: open = the contract's price at the bar start, close at the end,
  high/low extend max/min(open, close) by exponential tick counts; a
  one-trade bar has open = high = low = close. All prices are integer ticks
  times the root's tick size, in DBN 1e-9 fixed point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta

import numpy as np
from scipy.signal import lfilter

from foxhunt_pipeline.instruments.specs import (
    RootSpec,
    contract_symbol,
    expiry_date,
    listed_contracts,
    spec,
    spread_symbol,
)
from foxhunt_pipeline.synthetic.contracts import instrument_id_for, last_trade_ns, roll_centre_ns
from foxhunt_pipeline.synthetic.dbn_writer import (
    FIXED_PRICE_SCALE,
    OHLCV_DTYPE,
    STEP_SECONDS,
    Mapping,
    ohlcv_records,
)
from foxhunt_pipeline.synthetic.events import MarketEvents
from foxhunt_pipeline.synthetic.session import (
    DAY_S,
    NS,
    OPEN_S,
    bars_per_session,
    chicago_clock,
    seasonality,
    trade_days,
)
from foxhunt_pipeline.synthetic.signal import (
    DRIFT_STREAM,
    NO_DRIFT,
    ORACLE_HORIZON,
    DriftParams,
    OracleDay,
    expected_ticks,
    oracle_cost_ticks,
    oracle_day,
)

GENERATED_SCHEMAS = ("ohlcv-1m", "ohlcv-1s")
AR1_RHO = 0.1  # the weak predictable component: AR(1) of latent 1-bar returns
T_DOF = 4.0
VOL_SLOW_SD, VOL_SLOW_HALF_LIFE_S = 0.35, 23 * 3600
VOL_FAST_SD, VOL_FAST_HALF_LIFE_S = 0.30, 1800
GAP_VAR_PER_CLOSED_DAY = 0.10  # in units of a session's variance
WEEKEND_CLOSED_HOURS = 49
BASIS_MOVES_PER_SESSION = 6.0
ROLL_WIDTH_DAYS = 1.2
MIN_CONTRACT_SHARE = 0.015
SPREAD_SHARE, SPREAD_ROLL_SHARE, SPREAD_ROLL_WIDTH_DAYS = 0.002, 0.03, 2.5
AVG_TRADE_SIZE = 4.0
RANGE_EXTENSION = 0.35  # mean high/low extension, in units of the bar's sigma
CARRY_BY_CLASS = {"equity_index": 0.036, "rates": -0.015, "energy": -0.05, "metals": 0.05}
_DAY_NS = DAY_S * NS
_T_SCALE = math.sqrt((T_DOF - 2.0) / T_DOF)  # Student-t -> unit variance
_MEAN_ABS_Z = 1.0 * _T_SCALE  # E|T_4| = 1
_H_VAR = VOL_SLOW_SD**2 + VOL_FAST_SD**2  # variance of the log-vol state h


def _ar1(innov: np.ndarray, phi: float, gain: float, prev: float) -> np.ndarray:
    """y_t = phi * y_{t-1} + gain * innov_t, starting from y_{-1} = prev."""
    if innov.size == 0:
        return innov.astype(np.float64)
    y, _ = lfilter([gain], [1.0, -phi], innov, zi=[phi * prev])
    return y


def tick_moves(x: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """Integer ticks with the sign of x and E[k**2] = x**2 (variance-preserving rounding,
    so a sub-tick sigma still moves the price, just rarely)."""
    a = np.abs(x)
    lo = np.floor(a)
    q = (a * a - lo * lo) / (2.0 * lo + 1.0)
    return (np.sign(x) * (lo + (uniform < q))).astype(np.int64)


@dataclass
class _RootState:
    spot: int  # latent price, ticks
    u: float = 0.0  # the AR(1) part v_{t-1} of the innovation
    drift: float = 0.0  # the latent drift a_{t-1}
    position: float = 0.0  # the oracle's position held into the next bar
    h_slow: float = 0.0
    h_fast: float = 0.0
    offsets: dict[tuple[int, int], int] = field(default_factory=dict)


@dataclass
class _DayPath:
    """One day of a root's latent market, what its contracts' bars are built from."""

    ts: np.ndarray  # bar starts, ns
    sigma: np.ndarray  # each bar's return sd, ticks
    spot_start: np.ndarray  # latent price at the bar start, ticks
    spot_end: np.ndarray
    volume: np.ndarray  # the root's expected volume per bar, all contracts together


@dataclass
class _Basis:
    """The contracts that trade on a day and the offset paths O_c of those used."""

    cands: list[tuple[int, int]]  # listed (year, month), by expiry
    front_idx: np.ndarray  # index into cands of each bar's front contract
    start: dict[int, np.ndarray] = field(default_factory=dict)  # O_c at the bar start
    end: dict[int, np.ndarray] = field(default_factory=dict)


@dataclass
class _DayBars:
    """The records and symbol mappings of one day, collected instrument by instrument."""

    day: date
    chunks: list[np.ndarray] = field(default_factory=list)
    mappings: list[Mapping] = field(default_factory=list)
    seen: set[int] = field(default_factory=set)

    def add(self, symbol: str, iid: int, records: np.ndarray) -> None:
        """An instrument's records; its symbol is mapped for the day once."""
        if iid not in self.seen:
            self.seen.add(iid)
            self.mappings.append(Mapping(symbol, iid, self.day, self.day + timedelta(days=1)))
        self.chunks.append(records)


@dataclass(frozen=True)
class SimParams:
    step_s: int
    rho: float
    start: date
    drift: DriftParams = NO_DRIFT
    #: the predictable components are off from this bar start (UTC ns) on; None: never
    break_ns: int | None = None


class RootSimulator:
    """One root's market, simulated a UTC day at a time with its state carried over."""

    def __init__(self, root: str, seed: int, params: SimParams) -> None:
        self.spec: RootSpec = spec(root)
        self.root = root
        self.seed = seed
        self.p = params
        self.tick_fixed = round(self.spec.tick_size * FIXED_PRICE_SCALE)
        if abs(self.tick_fixed - self.spec.tick_size * FIXED_PRICE_SCALE) > 1e-6:
            raise ValueError(
                f"{root}: tick size {self.spec.tick_size} is not exact in 1e-9 fixed point"
            )
        self.state = _RootState(spot=round(self.spec.price_level / self.spec.tick_size))
        self.n_session = bars_per_session(params.step_s)
        self.phi_slow = 0.5 ** (params.step_s / VOL_SLOW_HALF_LIFE_S)
        self.phi_fast = 0.5 ** (params.step_s / VOL_FAST_HALF_LIFE_S)
        self.drift_sd, self.phi_drift = params.drift.per_bar(params.step_s)
        self.oracle_cost = oracle_cost_ticks(self.spec)
        self.last_oracle: OracleDay | None = None  # the latest simulated day's oracle stats

    def _offset(self, ym: tuple[int, int]) -> int:
        if ym not in self.state.offsets:
            carry = CARRY_BY_CLASS.get(self.spec.asset_class, 0.0)
            days = (expiry_date(self.root, *ym) - self.p.start).days
            self.state.offsets[ym] = round(
                self.spec.price_level * carry * days / 365 / self.spec.tick_size
            )
        return self.state.offsets[ym]

    def simulate_day(self, day: date, ts: np.ndarray, events: MarketEvents | None = None
                     ) -> tuple[np.ndarray, list[Mapping]]:
        """Every contract's and spread's bars for one UTC day's bar starts ``ts``, and
        their symbol mappings. Random draws, in order: the volatility state and the
        innovations, the tick rounding, the basis moves, then each instrument's bars (the
        drift has a stream of its own). ``events`` (:mod:`.events`, opt-in) add news jumps
        and thin holiday sessions; none draws a random number."""
        if ts.size == 0:
            return np.empty(0, dtype=OHLCV_DTYPE), []
        rng = np.random.default_rng(
            np.random.SeedSequence([self.seed, self.spec.root_id, self.p.step_s, day.toordinal()])
        )
        path = self._latent_path(rng, day, ts, events or None)
        basis = self._basis(rng, day, ts)
        out = _DayBars(day)
        for i in np.unique(basis.front_idx):
            self._pair_bars(rng, i, path, basis, out)
        return np.concatenate(out.chunks), out.mappings

    def _volatility_and_noise(
        self, rng: np.random.Generator, n: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The two log-vol factors, the Student-t shocks z and the AR(1) innovations v."""
        st = self.state
        eta = rng.standard_normal((2, n))
        h_slow = _ar1(
            eta[0], self.phi_slow, VOL_SLOW_SD * math.sqrt(1 - self.phi_slow**2), st.h_slow
        )
        h_fast = _ar1(
            eta[1], self.phi_fast, VOL_FAST_SD * math.sqrt(1 - self.phi_fast**2), st.h_fast
        )
        z = rng.standard_t(T_DOF, n) * _T_SCALE
        v = _ar1(z, self.p.rho, math.sqrt(1 - self.p.rho**2), st.u)
        return h_slow, h_fast, z, v

    def _drift(self, day: date, n: int) -> np.ndarray:
        """The latent drift a_t, from its own stream, so volume, contracts and OHLC draw
        as they would without it."""
        drift_rng = np.random.default_rng(
            np.random.SeedSequence(
                [self.seed, self.spec.root_id, self.p.step_s, day.toordinal(), DRIFT_STREAM]
            )
        )
        return _ar1(
            drift_rng.standard_normal(n),
            self.phi_drift,
            self.drift_sd * math.sqrt(1 - self.phi_drift**2),
            self.state.drift,
        )

    def _sigma(
        self, wd: np.ndarray, sod: np.ndarray, vol_season: np.ndarray, h: np.ndarray
    ) -> np.ndarray:
        """Each bar's return sd in ticks, with the gap variance on a session's first bar."""
        session_sd = self.spec.daily_vol * self.state.spot  # ticks
        sigma = session_sd / math.sqrt(self.n_session) * vol_season * np.exp(h - _H_VAR)
        reopen = sod == OPEN_S
        closed_h = np.where(wd == 6, WEEKEND_CLOSED_HOURS, 1)
        gap_var = GAP_VAR_PER_CLOSED_DAY * closed_h / 24.0 * session_sd**2
        return np.where(reopen, np.sqrt(sigma**2 + gap_var), sigma)

    def _latent_path(self, rng: np.random.Generator, day: date, ts: np.ndarray,
                     events: MarketEvents | None = None) -> _DayPath:
        """The latent spot over the day, the oracle's trades on it, and the root's
        expected volume per bar; carries the state to the next day."""
        sp, st, n = self.spec, self.state, ts.size
        wd, sod = chicago_clock(ts)
        vol_season, volume_share = seasonality(sod, sp.asset_class, self.p.step_s)
        h_slow, h_fast, z, v = self._volatility_and_noise(rng, n)
        h = h_slow + h_fast
        a = self._drift(day, n)
        u = a + math.sqrt(1 - self.drift_sd**2) * v
        broken = None if self.p.break_ns is None else ts >= self.p.break_ns
        if broken is not None and broken.any():  # the regime change: as --random-walk
            a, v = np.where(broken, 0.0, a), np.where(broken, z, v)
            u = np.where(broken, z, u)
        sigma = self._sigma(wd, sod, vol_season, h)
        moves = tick_moves(sigma * u, rng.random(n))
        if events is not None:
            moves = moves + events.jump_ticks(self.root, ts, st.spot)
        spot_end = st.spot + np.cumsum(moves)
        spot_start = np.concatenate(([st.spot], spot_end[:-1]))
        expected = expected_ticks(
            sigma, a, v, phi=self.phi_drift, rho=self.p.rho, s=self.drift_sd,
            horizon=ORACLE_HORIZON,
        )
        if broken is not None:
            expected = np.where(broken, 0.0, expected)
        self.last_oracle, st.position = oracle_day(
            expected, moves, spot_start, self.oracle_cost, st.position, ORACLE_HORIZON
        )
        st.spot, st.u, st.drift, st.h_slow, st.h_fast = (
            int(spot_end[-1]),
            float(v[-1]),
            float(a[-1]),
            float(h_slow[-1]),
            float(h_fast[-1]),
        )
        activity = np.exp(h - 0.5 * _H_VAR) * (0.5 + 0.5 * np.abs(z) / _MEAN_ABS_Z)
        volume = sp.daily_volume * volume_share * activity
        share = None if events is None else events.volume_share(trade_days(ts))
        if share is not None:
            volume = volume * share
        return _DayPath(ts, sigma, spot_start, spot_end, volume)

    def _basis(self, rng: np.random.Generator, day: date, ts: np.ndarray) -> _Basis:
        """The contracts trading at each bar (the first two unexpired) and the offset
        paths O_c of those used; carries the offsets to the next day."""
        cands = listed_contracts(
            self.root, day - timedelta(days=1), day + timedelta(days=2), extra=2
        )
        last = np.array([last_trade_ns(self.root, *c) for c in cands], dtype=np.int64)
        front_idx = np.searchsorted(last, ts, side="right")
        if front_idx.max() + 1 >= len(cands):
            raise RuntimeError(f"{self.root}: not enough listed contracts after {day}")
        n = ts.size
        p_move = BASIS_MOVES_PER_SESSION / self.n_session
        basis = _Basis(cands, front_idx)
        for i in range(int(front_idx.min()), int(front_idx.max()) + 2):
            jump = (rng.random(n) < p_move) * rng.choice(np.array([-1, 1]), n)
            o0 = self._offset(cands[i])
            path = o0 + np.cumsum(jump)
            basis.end[i], basis.start[i] = path, np.concatenate(([o0], path[:-1]))
            self.state.offsets[cands[i]] = int(path[-1])
        return basis

    def _pair_bars(
        self,
        rng: np.random.Generator,
        i: int,
        path: _DayPath,
        basis: _Basis,
        out: _DayBars,
    ) -> None:
        """The bars of front contract ``i``, the next one and their spread, over the bars
        where ``i`` is the front; volume moves to the next contract around the roll."""
        ts = path.ts
        sel = basis.front_idx == i
        (fy, fm), (ny, nm) = basis.cands[i], basis.cands[i + 1]
        t_days = (ts[sel] - roll_centre_ns(self.root, fy, fm)) / _DAY_NS
        s_next = MIN_CONTRACT_SHARE + (1 - 2 * MIN_CONTRACT_SHARE) / (
            1 + np.exp(-t_days / ROLL_WIDTH_DAYS)
        )
        lam = path.volume[sel]
        ext = RANGE_EXTENSION * path.sigma[sel]
        front_sym, next_sym = (
            contract_symbol(self.root, fy, fm),
            contract_symbol(self.root, ny, nm),
        )
        for j, sym, share in ((i, front_sym, 1 - s_next), (i + 1, next_sym, s_next)):
            y, m = basis.cands[j]
            iid = instrument_id_for(self.root, y, m)
            o = path.spot_start[sel] + basis.start[j][sel]
            c = path.spot_end[sel] + basis.end[j][sel]
            out.add(sym, iid, self._bars(rng, iid, ts[sel], o, c, lam * share, ext))
        spread_share = SPREAD_SHARE + SPREAD_ROLL_SHARE * np.exp(
            -0.5 * (t_days / SPREAD_ROLL_WIDTH_DAYS) ** 2
        )
        iid = instrument_id_for(self.root, fy, fm, spread=True)
        o = basis.start[i][sel] - basis.start[i + 1][sel]
        c = basis.end[i][sel] - basis.end[i + 1][sel]
        out.add(
            spread_symbol(front_sym, next_sym),
            iid,
            self._bars(rng, iid, ts[sel], o, c, lam * spread_share, 0.25),
        )

    def _bars(
        self,
        rng: np.random.Generator,
        iid: int,
        ts: np.ndarray,
        o: np.ndarray,
        c: np.ndarray,
        lam: np.ndarray,
        ext: np.ndarray | float,
    ) -> np.ndarray:
        trades = rng.poisson(lam / AVG_TRADE_SIZE)
        volume = trades + rng.poisson(trades * (AVG_TRADE_SIZE - 1.0))
        ext = np.broadcast_to(ext, ts.shape)
        up = np.floor(rng.exponential(1.0, ts.size) * ext).astype(np.int64)
        dn = np.floor(rng.exponential(1.0, ts.size) * ext).astype(np.int64)
        keep = trades > 0
        single = trades[keep] == 1
        o, c, up, dn = o[keep], c[keep], up[keep], dn[keep]
        o = np.where(single, c, o)
        high = np.where(single, c, np.maximum(o, c) + up)
        low = np.where(single, c, np.minimum(o, c) - dn)
        f = self.tick_fixed
        return ohlcv_records(
            iid,
            ts[keep],
            o * f,
            high * f,
            low * f,
            c * f,
            volume[keep],
            schema=_schema_for_step(self.p.step_s),
        )


def _schema_for_step(step_s: int) -> str:
    return next(s for s, v in STEP_SECONDS.items() if v == step_s)


def check_args(roots: Sequence[str], schema: str) -> None:
    """Refuse a schema or root the generator cannot make before any file is written."""
    if schema not in GENERATED_SCHEMAS:
        raise ValueError(
            f"schema {schema!r} is not generated; use one of {', '.join(GENERATED_SCHEMAS)}"
        )
    if not roots:
        raise ValueError("no roots given")
    for r in roots:
        spec(r)  # raises KeyError naming an unknown root
