"""The observed-feature library (``f_*``): polars expressions over past bars only.

How it stays causal and fast: everything here is a backward-looking rolling window,
a backward shift, a cumulative op or an exponential average, evaluated over one
(root, contract_seq) segment's rows in time order (never centred, never a forward shift);
the builder runs one segment at a time, so nothing spans a roll. EMAs and session state
are also ``.over`` the segment / session, so the expressions stay correct on a frame of
several segments. The first ``warmup_bars`` rows of every segment are dropped.

Warm-up: ``FeatureConfig.warmup_bars`` = longest window or lag + ``WARMUP_MARGIN``
(250 bars by default). From that row of a segment on every feature is finite; earlier rows
are dropped, so the features table and the training dataset never see them.

Zero variance (a constant-price stretch, filled minutes): every ratio goes through
``_div`` with an explicit default, and skew / kurtosis are 0 where the std is ~0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import polars as pl

from foxhunt_pipeline.features.grid import SESSION_MINUTES

DEFAULT_WINDOWS: tuple[int, ...] = (5, 10, 20, 30, 60, 120, 240)
DEFAULT_GROUPS: tuple[str, ...] = (
    "returns",
    "return_stats",
    "volatility",
    "range",
    "momentum",
    "trend",
    "volume",
    "shape",
    "session",
    "roll",
    "filled",
)
WARMUP_MARGIN = 10
RET_EPS = 1e-9  # below any real std of log returns (one tick of ES over 240 bars is ~3e-6)
REL_EPS = 1e-12  # relative to the price level, for price ranges
MACD_SPECS: tuple[tuple[int, int, int], ...] = ((12, 26, 9), (5, 35, 5), (24, 52, 18))
SLOPE_LAG = 5
LN2 = math.log(2.0)

SEG = "_seg"  # int id of (root, contract_seq) within one root frame
SESS = "_sess"  # int id of (segment, trade date)


@dataclass(frozen=True)
class FeatureConfig:
    """Which feature groups to compute and how the table is built."""

    groups: tuple[str, ...] = DEFAULT_GROUPS
    windows: tuple[int, ...] = DEFAULT_WINDOWS
    return_horizons: tuple[int, ...] = (1, 2, 3, 4, 5, 10, 15)
    return_lags: int = 5
    horizons: int = 5
    bar_seconds: int = 60
    fill_grid: bool = True
    min_rows_policy: Literal["error", "skip"] = "error"

    def __post_init__(self) -> None:
        unknown = [g for g in self.groups if g not in GROUPS]
        if unknown:
            raise ValueError(f"unknown feature groups {unknown}; known: {list(GROUPS)}")
        if not self.windows or min(self.windows) < 3:
            raise ValueError(f"windows must be >= 3 bars, got {self.windows}")
        if self.min_rows_policy not in ("error", "skip"):
            raise ValueError(
                f"min_rows_policy must be 'error' or 'skip', got {self.min_rows_policy!r}"
            )
        if self.horizons < 1:
            raise ValueError("horizons must be >= 1")

    @property
    def warmup_bars(self) -> int:
        longest = max(*self.windows, *self.return_horizons, self.return_lags, SLOPE_LAG)
        return int(longest + WARMUP_MARGIN)

    def as_dict(self) -> dict[str, object]:
        return {
            "groups": list(self.groups),
            "windows": list(self.windows),
            "return_horizons": list(self.return_horizons),
            "return_lags": self.return_lags,
            "horizons": self.horizons,
            "bar_seconds": self.bar_seconds,
            "fill_grid": self.fill_grid,
            "warmup_bars": self.warmup_bars,
        }


# --- helpers ---------------------------------------------------------------------------
C, OP, H, L = (pl.col(c) for c in ("close", "open", "high", "low"))
LC, LO, LH, LL = (pl.col(c) for c in ("_lc", "_lo", "_lh", "_ll"))
R = pl.col("_r")


def _div(num: pl.Expr, den: pl.Expr, default: float = 0.0, eps: float = RET_EPS) -> pl.Expr:
    return pl.when(den.abs() > eps).then(num / den).otherwise(pl.lit(default, pl.Float64))


def _sqrt_pos(x: pl.Expr) -> pl.Expr:
    return x.fill_nan(0.0).clip(lower_bound=0.0).sqrt()


def _std(x: pl.Expr, w: int) -> pl.Expr:
    return _sqrt_pos(x.rolling_var(w))


def ewm(x: pl.Expr, span: int) -> pl.Expr:
    return x.ewm_mean(span=span, adjust=False).over(SEG)


def ema_col(span: int) -> str:
    return f"_ema{span}"


def base_exprs() -> list[list[pl.Expr]]:
    """Per-bar building blocks every group may use (stages, each sees the previous)."""
    first = [
        C.log().alias("_lc"),
        OP.log().alias("_lo"),
        H.log().alias("_lh"),
        L.log().alias("_ll"),
        pl.col("volume").cast(pl.Float64).alias("_v"),
        C.shift(1).fill_null(C).alias("_pc"),
    ]
    second = [
        LC.diff().fill_null(0.0).alias("_r"),
        pl.col("_v").log1p().alias("_lv"),
        ((LH - LL) ** 2).alias("_hl2"),
        (LC - LO).alias("_co"),
        ((LH - LC) * (LH - LO) + (LL - LC) * (LL - LO)).alias("_rs"),
        (LO - LC.shift(1)).fill_null(0.0).alias("_gap"),
        ((pl.max_horizontal(H, pl.col("_pc")) - pl.min_horizontal(L, pl.col("_pc"))) / C).alias(
            "_tr"
        ),
    ]
    return [first, second]


Stages = list[dict[str, pl.Expr]]


def rstd_col(w: int) -> str:
    return f"_rstd{w}"


def shared_exprs(cfg: FeatureConfig) -> list[pl.Expr]:
    """Rolling std of returns per window: used by several groups, computed once."""
    if not {"return_stats", "volatility"} & set(cfg.groups):
        return []
    return [_std(R, w).alias(rstd_col(w)) for w in cfg.windows]


# --- groups: each returns stages of {name: Float64 expr}; f_* names are outputs ---------
def g_returns(cfg: FeatureConfig) -> Stages:
    out = {f"f_ret_{k}b": LC - LC.shift(k) for k in cfg.return_horizons}
    out |= {f"f_ret_lag{j}": R.shift(j) for j in range(1, cfg.return_lags + 1)}
    return [out]


def g_return_stats(cfg: FeatureConfig) -> Stages:
    out: dict[str, pl.Expr] = {}
    for w in cfg.windows:
        std = pl.col(rstd_col(w))
        flat = std <= RET_EPS
        out[f"f_ret_mean_{w}"] = R.rolling_mean(w)
        out[f"f_ret_std_{w}"] = std
        out[f"f_ret_skew_{w}"] = pl.when(flat).then(0.0).otherwise(R.rolling_skew(w).fill_nan(0.0))
        out[f"f_ret_kurt_{w}"] = (
            pl.when(flat).then(0.0).otherwise(R.rolling_kurtosis(w).fill_nan(0.0))
        )
        out[f"f_ret_min_{w}"] = R.rolling_min(w)
        out[f"f_ret_max_{w}"] = R.rolling_max(w)
        out[f"f_ret_z_{w}"] = _div(R, std)
    return [out]


def g_volatility(cfg: FeatureConfig) -> Stages:
    pre: dict[str, pl.Expr] = {}
    out: dict[str, pl.Expr] = {}
    hl2, co, rs, gap = (pl.col(c) for c in ("_hl2", "_co", "_rs", "_gap"))
    longest = max(cfg.windows)
    for w in cfg.windows:
        pre[f"_vol_rsm{w}"] = rs.rolling_mean(w)
    for w in cfg.windows:
        k = 0.34 / (1.34 + (w + 1) / (w - 1))
        rsm = pl.col(f"_vol_rsm{w}")
        out[f"f_vol_parkinson_{w}"] = _sqrt_pos(hl2.rolling_mean(w) / (4 * LN2))
        out[f"f_vol_gk_{w}"] = _sqrt_pos((0.5 * hl2 - (2 * LN2 - 1) * co**2).rolling_mean(w))
        out[f"f_vol_rs_{w}"] = _sqrt_pos(rsm)
        yz = gap.rolling_var(w).fill_nan(0.0) + k * co.rolling_var(w).fill_nan(0.0)
        out[f"f_vol_yz_{w}"] = _sqrt_pos(yz + (1 - k) * rsm)
        if w < longest:
            out[f"f_vol_ratio_{w}_{longest}"] = _div(
                pl.col(rstd_col(w)), pl.col(rstd_col(longest)), default=1.0
            )
    return [pre, out]


def g_range(cfg: FeatureConfig) -> Stages:
    tr = pl.col("_tr")
    pre = {f"_atr{w}": tr.rolling_mean(w) for w in cfg.windows}
    out = {"f_range_log": LH - LL, "f_true_range": tr}
    for w in cfg.windows:
        atr = pl.col(f"_atr{w}")
        out[f"f_atr_{w}"] = atr
        out[f"f_range_to_atr_{w}"] = _div(LH - LL, atr)
    return [pre, out]


def g_momentum(cfg: FeatureConfig) -> Stages:
    pre: dict[str, pl.Expr] = {}
    first: dict[str, pl.Expr] = {}
    second: dict[str, pl.Expr] = {}
    third: dict[str, pl.Expr] = {}
    eps = REL_EPS * 1e3
    for w in cfg.windows:
        pre[f"_mom_up{w}"] = R.clip(lower_bound=0.0).rolling_mean(w)
        pre[f"_mom_dn{w}"] = (-R).clip(lower_bound=0.0).rolling_mean(w)
        pre[f"_mom_hh{w}"] = H.rolling_max(w)
        pre[f"_mom_ll{w}"] = L.rolling_min(w)
    for w in cfg.windows:
        up, dn = pl.col(f"_mom_up{w}"), pl.col(f"_mom_dn{w}")
        hh, ll = pl.col(f"_mom_hh{w}"), pl.col(f"_mom_ll{w}")
        rel_span = (hh - ll) / C
        first[f"f_roc_{w}"] = C / C.shift(w) - 1.0
        first[f"f_rsi_{w}"] = _div(up, up + dn, default=0.5)
        first[f"f_stoch_k_{w}"] = _div((C - ll) / C, rel_span, default=0.5, eps=eps)
        first[f"f_williams_r_{w}"] = -_div((hh - C) / C, rel_span, default=0.5, eps=eps)
        second[f"f_stoch_d_{w}"] = pl.col(f"f_stoch_k_{w}").cast(pl.Float64).rolling_mean(3)
    for fast, slow, sig in MACD_SPECS:
        line = f"f_macd_{fast}_{slow}"
        signal = f"f_macd_signal_{fast}_{slow}_{sig}"
        first[line] = (pl.col(ema_col(fast)) - pl.col(ema_col(slow))) / C
        second[signal] = ewm(pl.col(line).cast(pl.Float64), sig)
        third[f"f_macd_hist_{fast}_{slow}_{sig}"] = pl.col(line).cast(pl.Float64) - pl.col(signal)
    return [pre, first, second, third]


def ema_spans(cfg: FeatureConfig) -> list[int]:
    spans = set(cfg.windows) if "trend" in cfg.groups else set()
    if "momentum" in cfg.groups:
        spans |= {s for spec in MACD_SPECS for s in spec[:2]}
    return sorted(spans)


def g_trend(cfg: FeatureConfig) -> Stages:
    out: dict[str, pl.Expr] = {}
    ws = list(cfg.windows)
    pre = {f"_lema{w}": pl.col(ema_col(w)).log() for w in ws}
    pre |= {f"_lsma{w}": C.rolling_mean(w).log() for w in ws}
    for w in ws:
        le, ls = pl.col(f"_lema{w}"), pl.col(f"_lsma{w}")
        out[f"f_ema_dev_{w}"] = LC - le
        out[f"f_ema_slope_{w}"] = le - le.shift(SLOPE_LAG)
        out[f"f_sma_dev_{w}"] = LC - ls
        out[f"f_sma_slope_{w}"] = ls - ls.shift(SLOPE_LAG)
    for a, b in zip(ws, ws[2:], strict=False):
        out[f"f_ema_cross_{a}_{b}"] = pl.col(f"_lema{a}") - pl.col(f"_lema{b}")
    return [pre, out]


def g_volume(cfg: FeatureConfig) -> Stages:
    v, lv = pl.col("_v"), pl.col("_lv")
    tp = (H + L + C) / 3.0
    pre: dict[str, pl.Expr] = {}
    out = {"f_log_volume": lv}
    for w in cfg.windows:
        pre[f"_vol_sum{w}"] = v.rolling_sum(w)
        pre[f"_vol_lvm{w}"] = lv.rolling_mean(w)
        pre[f"_vol_lvs{w}"] = _std(lv, w)
        pre[f"_vol_vwap{w}"] = _div((tp * v).rolling_sum(w), v.rolling_sum(w), default=0.0, eps=0.5)
    for w in cfg.windows:
        vsum, vwap = pl.col(f"_vol_sum{w}"), pl.col(f"_vol_vwap{w}")
        out[f"f_volume_z_{w}"] = _div(lv - pl.col(f"_vol_lvm{w}"), pl.col(f"_vol_lvs{w}"), eps=1e-6)
        out[f"f_volume_ratio_{w}"] = (v + 1.0).log() - (vsum / w + 1.0).log()
        out[f"f_obv_change_{w}"] = _div((R.sign() * v).rolling_sum(w), vsum, eps=0.5)
        out[f"f_vwap_dev_{w}"] = pl.when(vwap > 0).then(LC - vwap.log()).otherwise(0.0)
    return [pre, out]


def g_shape(cfg: FeatureConfig) -> Stages:
    rng = H - L
    eps = REL_EPS * 1e3
    rel = rng / C
    first = {
        "f_body": _div((C - OP) / C, rel, eps=eps),
        "f_upper_wick": _div((H - pl.max_horizontal(OP, C)) / C, rel, eps=eps),
        "f_lower_wick": _div((pl.min_horizontal(OP, C) - L) / C, rel, eps=eps),
        "f_close_location": _div((C - L) / C, rel, default=0.5, eps=eps),
        "f_log_hl": LH - LL,
        "f_log_co": LC - LO,
        "f_gap": pl.col("_gap"),
    }
    second = {
        f"f_body_mean_{w}": pl.col("f_body").cast(pl.Float64).rolling_mean(w) for w in cfg.windows
    }
    return [first, second]


def g_session(cfg: FeatureConfig) -> Stages:
    sm = pl.col("_sm").cast(pl.Float64)
    return [
        {
            "f_session_elapsed": sm / SESSION_MINUTES,
            "f_session_to_close": (SESSION_MINUTES - sm) / SESSION_MINUTES,
            "f_session_return": LC - LO.first().over(SESS),
            "f_session_high_dist": LC - LH.cum_max().over(SESS),
            "f_session_low_dist": LC - LL.cum_min().over(SESS),
        }
    ]


def g_roll(cfg: FeatureConfig) -> Stages:
    days = (pl.col("expiry") - pl.col("_td")).dt.total_days().cast(pl.Float64).clip(0.0)
    return [
        {
            "f_days_to_expiry": days,
            "f_days_to_roll": (days - pl.col("_roll_lead")).clip(0.0),
            # bars since the contract's first (``_cpos``), not the stretch's: a hole in the data
            # does not make a contract new
            "f_log_bars_in_contract": pl.col("_cpos").cast(pl.Float64).log1p(),
        }
    ]


def g_filled(cfg: FeatureConfig) -> Stages:
    filled = pl.col("is_filled").cast(pl.Float64)
    out = {f"f_filled_frac_{w}": filled.rolling_mean(w) for w in cfg.windows}
    out["f_log_bars_since_trade"] = (pl.col("_row") - pl.col("_last_real")).cast(pl.Float64).log1p()
    return [out]


GROUPS: dict[str, Callable[[FeatureConfig], Stages]] = {
    "returns": g_returns,
    "return_stats": g_return_stats,
    "volatility": g_volatility,
    "range": g_range,
    "momentum": g_momentum,
    "trend": g_trend,
    "volume": g_volume,
    "shape": g_shape,
    "session": g_session,
    "roll": g_roll,
    "filled": g_filled,
}


def feature_stages(cfg: FeatureConfig) -> list[list[pl.Expr]]:
    """All selected groups merged stage by stage, each f_* cast to Float32."""
    merged: list[dict[str, pl.Expr]] = []
    for g in cfg.groups:
        for i, stage in enumerate(GROUPS[g](cfg)):
            while len(merged) <= i:
                merged.append({})
            clash = set(stage) & {n for s in merged for n in s}
            if clash:
                raise ValueError(f"feature names defined twice: {sorted(clash)}")
            merged[i].update(stage)
    return [
        [(e if n.startswith("_") else e.cast(pl.Float32)).alias(n) for n, e in s.items()]
        for s in merged
    ]


def feature_names(cfg: FeatureConfig | None = None) -> list[str]:
    cfg = cfg or FeatureConfig()
    return [n for g in cfg.groups for stage in GROUPS[g](cfg) for n in stage if n.startswith("f_")]
