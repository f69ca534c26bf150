"""The generator's skill where skill exists: a latent drift, and the oracle that knows it.

Why: a pipeline that never sees a signal which pays after costs cannot show that its models
find one, so a broken model and a working one look the same. The drift is strong enough to
survive 1 tick + fee per side at the 5-bar horizon, and hidden: it shows only through past
returns, so a model must estimate it (an exponential average of past returns does; the
oracle, which reads it directly, is the upper bound a run can be measured against).

The process, per root, in units of the bar's return sd sigma_t (see :mod:`.market`):

* ``a_t = phi * a_{t-1} + s * sqrt(1 - phi**2) * eta_t``, eta_t ~ N(0, 1) from its own
  random stream; ``phi = 0.5 ** (bar seconds / half_life_s)`` and ``s = sd_per_minute *
  sqrt(bar seconds / 60)``: one continuous-time process whatever the bar size.
* The return innovation is ``u_t = a_t + sqrt(1 - s**2) * v_t`` (v_t: the unit-variance
  AR(1) of fat-tailed shocks), so the drift adds no variance.

Strength (defaults, 1-minute bars): s = 0.2, so the drift is 4% of a minute's return
variance, with a 30-minute half-life; a 20-bar momentum reaches a 5-bar IC of about 0.2 on
ES, the oracle about 0.4 (docs/synthetic.md has the numbers of the demo data).

The oracle knows a_t, v_t and the sigma of the next bars at the close of bar t. Its forecast
is the expected tick move over the next :data:`ORACLE_HORIZON` bars (:func:`expected_ticks`:
``E[u_{t+k}] = phi**k a_t + sqrt(1-s**2) rho**k v_t``, through the tick rounding). It goes
long (short) when that exceeds +(-) the one-way cost and stays in until the forecast
changes sign (in calibration this hysteresis beat a symmetric 1 x cost band, as
``models.trading_rules.threshold_positions`` on the 5-bar forecast, which turned over
3x as often and lost on ZN). Positions are decided at the close of t, held over bar t + 1,
and pay the cost on every change. It trades the latent spot (rolls and per-contract basis
moves are ignored).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import numpy as np

from foxhunt_pipeline.instruments.specs import RootSpec

DRIFT_SD = 0.2  # stationary sd of the latent drift, in units of a 1-minute bar's sigma
DRIFT_HALF_LIFE_S = 1800  # the drift's half-life: 30 minutes
DRIFT_STREAM = 0x0D21F7  # the drift's own entry in the day's SeedSequence
ORACLE_HORIZON = 5  # bars ahead the oracle forecasts and trades
ORACLE_ENTER_K, ORACLE_EXIT_K = 1.0, 0.0  # enter past 1 x cost, leave when the sign turns
ORACLE_COST_TICKS = 1.0  # one-way cost: half spread + slippage (as assets.features)
ORACLE_FEE_PER_CONTRACT = 1.0  # exchange + broker fee per contract per side, currency
SESSION_HOURS, TRADING_DAYS_PER_YEAR = 23.0, 252  # as features.dataset.DatasetConfig


@dataclass(frozen=True)
class DriftParams:
    """The latent drift: its sd per 1-minute bar (0 = none) and half-life in seconds."""

    sd_per_minute: float
    half_life_s: float = DRIFT_HALF_LIFE_S

    def per_bar(self, step_s: int) -> tuple[float, float]:
        """(s, phi) at a bar size: the drift's sd in units of one bar's sigma, its AR(1)
        coefficient per bar."""
        s = self.sd_per_minute * math.sqrt(step_s / 60.0)
        if not 0.0 <= s < 1.0 or self.half_life_s <= 0:
            raise ValueError(
                f"drift sd {self.sd_per_minute} per minute is {s:.3f} of a {step_s}s bar's "
                f"sigma and half-life {self.half_life_s}s; need 0 <= sd < 1 and half-life > 0"
            )
        return s, 0.5 ** (step_s / self.half_life_s)


NO_DRIFT = DriftParams(0.0)
DEFAULT_DRIFT = DriftParams(DRIFT_SD, DRIFT_HALF_LIFE_S)


def oracle_cost_ticks(root: RootSpec) -> float:
    """One-way cost of one contract in ticks: :data:`ORACLE_COST_TICKS` + the fee."""
    return ORACLE_COST_TICKS + ORACLE_FEE_PER_CONTRACT / (root.tick_size * root.multiplier)


def bars_per_year(step_s: int) -> float:
    return SESSION_HOURS * 3600 / step_s * TRADING_DAYS_PER_YEAR


_GH_NODES, _GH_WEIGHTS = np.polynomial.hermite_e.hermegauss(24)
_GH_WEIGHTS = _GH_WEIGHTS / _GH_WEIGHTS.sum()


def mean_ticks(x: np.ndarray) -> np.ndarray:
    """E[k | x] of ``market.tick_moves``: x where |x| >> 1 tick, sign(x) * x**2 under one."""
    a = np.abs(x)
    lo = np.floor(a)
    return np.sign(x) * (lo + (a * a - lo * lo) / (2.0 * lo + 1.0))


def expected_ticks(
    sigma: np.ndarray, a: np.ndarray, v: np.ndarray, *, phi: float, rho: float, s: float,
    horizon: int,
) -> np.ndarray:
    """E[k_{t+1} + ... + k_{t+horizon} | a_t, v_t, sigma]: the oracle's forecast in ticks at
    the close of t. u_{t+j} given the state is taken as Gaussian with mean phi**j a_t +
    sqrt(1 - s**2) rho**j v_t and the rest of its unit variance; the tick rounding's mean is
    integrated over it (Gauss-Hermite), so a sub-tick sigma (ZN) is not overrated. The sigma
    of bar t+j is the day's own (the last bar's beyond the day's end)."""
    n = a.size
    gain = math.sqrt(1.0 - s * s)
    out = np.zeros(n)
    for j in range(1, horizon + 1):
        sig = sigma[np.minimum(np.arange(n) + j, n - 1)]
        mean = phi**j * a + gain * rho**j * v
        sd = math.sqrt(max(1.0 - s * s * phi ** (2 * j) - gain * gain * rho ** (2 * j), 0.0))
        x = sig[:, None] * (mean[:, None] + sd * _GH_NODES[None, :])
        out += mean_ticks(x) @ _GH_WEIGHTS
    out[np.abs(out) < 1e-9] = 0.0  # no state, no forecast: not rounding noise
    return out


@dataclass
class OracleDay:
    """One root's oracle over some bars, as sums, so days and roots add up exactly."""

    n_bars: int = 0
    pnl_sum: float = 0.0  # net log return
    pnl_sq_sum: float = 0.0
    gross_sum: float = 0.0
    cost_sum: float = 0.0
    turnover: float = 0.0  # contracts traded
    trades: int = 0  # entries into a position (a flip counts once)
    ic_n: int = 0  # (forecast, realised 5-bar log return) pairs inside the day
    ic_sx: float = 0.0
    ic_sy: float = 0.0
    ic_sxx: float = 0.0
    ic_syy: float = 0.0
    ic_sxy: float = 0.0

    def __add__(self, other: OracleDay) -> OracleDay:
        return OracleDay(**{f.name: getattr(self, f.name) + getattr(other, f.name)
                            for f in fields(self)})

    def to_json(self) -> dict[str, float | int]:
        """Floats at 12 significant digits: the sidecar of a day is reproducible byte for byte."""
        return {k: (float(f"{v:.12g}") if isinstance(v, float) else int(v))
                for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, d: dict[str, float | int], where: str = "") -> OracleDay:
        names = {f.name for f in fields(cls)}
        missing = names - d.keys()
        if missing:
            raise ValueError(f"{where}: oracle statistics lack {sorted(missing)}")
        return cls(**{k: (int(d[k]) if k in ("n_bars", "trades", "ic_n") else float(d[k]))
                      for k in names})

    def summary(self, bars_per_year: float) -> dict[str, float | int | None]:
        """Sharpe (ddof 1, as ``models.sharpe.sharpe_ratio``, from running sums), annual log return,
        IC of the 5-bar forecast; None where undefined (no trades, too few bars)."""
        n = self.n_bars
        mean = self.pnl_sum / n if n else math.nan
        var = (self.pnl_sq_sum - n * mean * mean) / (n - 1) if n > 1 else math.nan
        sharpe = (mean / math.sqrt(var) * math.sqrt(bars_per_year)
                  if self.trades and var > 0 else None)
        k = self.ic_n
        ic = None
        if k > 1:
            cxx = self.ic_sxx - self.ic_sx**2 / k
            cyy = self.ic_syy - self.ic_sy**2 / k
            cxy = self.ic_sxy - self.ic_sx * self.ic_sy / k
            ic = cxy / math.sqrt(cxx * cyy) if cxx > 0 and cyy > 0 else None
        return {
            "sharpe": sharpe,
            "annual_log_return": mean * bars_per_year if n else None,
            "ic": ic,
            "n_bars": n,
            "trades": self.trades,
            "turnover": self.turnover,
            "total_cost": self.cost_sum,
        }


def oracle_positions(
    expected: np.ndarray, cost_ticks: float, position: float,
    enter_k: float | None = None, exit_k: float | None = None,
) -> np.ndarray:
    """Hysteresis: enter when the forecast clears ``enter_k`` x the one-way cost, leave
    when it falls below ``exit_k`` x cost (or enter the other side)."""
    enter = (ORACLE_ENTER_K if enter_k is None else enter_k) * cost_ticks
    leave = (ORACLE_EXIT_K if exit_k is None else exit_k) * cost_ticks
    out = np.empty(expected.size)
    p = position
    for i, e in enumerate(expected.tolist()):
        if e > enter:
            p = 1.0
        elif e < -enter:
            p = -1.0
        elif (p > 0 and e < leave) or (p < 0 and e > -leave):
            p = 0.0
        out[i] = p
    return out


def oracle_day(
    expected: np.ndarray,
    moves: np.ndarray,
    spot_start: np.ndarray,
    cost_ticks: float,
    position: float,
    horizon: int = ORACLE_HORIZON,
) -> tuple[OracleDay, float]:
    """The oracle over one day's bars (module docstring); returns its statistics and the
    position it carries into the next day. ``expected`` and ``moves`` in ticks."""
    n = moves.size
    if n == 0:
        return OracleDay(), position
    spot_start = spot_start.astype(np.float64)
    spot_end = spot_start + moves
    log_ret = np.log(spot_end / spot_start)
    pos = oracle_positions(expected, cost_ticks, position)
    held = np.concatenate(([position], pos[:-1]))  # position over bar t, decided at t - 1
    change = np.abs(pos - held)
    cost = cost_ticks * change / spot_end
    gross = held * log_ret
    pnl = gross - cost
    trades = int(((pos != 0) & (np.sign(pos) != np.sign(held))).sum())
    x = (expected / spot_end)[: max(n - horizon, 0)]
    log_spot = np.log(spot_end)
    y = log_spot[horizon:] - log_spot[:-horizon] if n > horizon else np.zeros(0)
    day = OracleDay(
        n_bars=n, pnl_sum=float(pnl.sum()), pnl_sq_sum=float((pnl * pnl).sum()),
        gross_sum=float(gross.sum()), cost_sum=float(cost.sum()),
        turnover=float(change.sum()), trades=trades, ic_n=int(x.size),
        ic_sx=float(x.sum()), ic_sy=float(y.sum()), ic_sxx=float((x * x).sum()),
        ic_syy=float((y * y).sum()), ic_sxy=float((x * y).sum()),
    )
    return day, float(pos[-1])
