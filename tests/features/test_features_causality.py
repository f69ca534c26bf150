"""Causality over the whole default feature set: no feature or known input sees the future,
and targets see only the future."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from foxhunt_pipeline.features import build_features
from foxhunt_pipeline.features.grid import trade_date_expr
from tests.features_fixtures import features_by_date, make_continuous

PRICES = ("open", "high", "low", "close")
SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@lru_cache(maxsize=1)
def bars() -> pl.DataFrame:
    # one root, two contracts, two short sessions: every segment a bit longer than the warm-up
    return make_continuous(
        days=2, roots=("ES",), roll_after_day=0, session_fraction=0.35, constant_minutes=60
    )


@lru_cache(maxsize=1)
def base() -> pl.DataFrame:
    return build_features(bars())


def _inputs(df: pl.DataFrame) -> list[str]:
    return [c for c in df.columns if c.startswith(("f_", "k_", "s_"))] + ["is_filled", "symbol"]


def _perturb(b: pl.DataFrame, mask: pl.Expr, seed: int, drop: bool) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    n = b.height
    factor = pl.Series(np.exp(rng.normal(0, 0.01, n)))
    vol = pl.Series(rng.integers(1, 10_000, n).astype(np.uint64))
    out = b.with_columns(
        [pl.when(mask).then(pl.col(c) * factor).otherwise(pl.col(c)) for c in PRICES]
        + [pl.when(mask).then(vol).otherwise(pl.col("volume")).alias("volume")]
    )
    if drop:  # also remove some of the perturbed bars (holes the grid then fills)
        keep = pl.Series(rng.random(n) > 0.3)
        out = out.filter(~mask | keep)
    return out


@SETTINGS
@given(frac=st.floats(0.05, 0.95), seed=st.integers(0, 2**16), drop=st.booleans())
def test_perturbing_bars_after_t_leaves_everything_at_or_before_t_bit_identical(frac, seed, drop):
    b = bars()
    f0 = base()
    t = f0["ts_event"].sort()[int(frac * (f0.height - 1))]
    after = pl.col("ts_event") > t
    f1 = build_features(_perturb(b, after, seed, drop))
    if seed % 3 == 0:  # the partitioned path (storage by trade date) holds the same property
        f1 = features_by_date(_perturb(b, after, seed, drop))
    cols = _inputs(f0)
    left = f0.filter(pl.col("ts_event") <= t).select("ts_event", *cols)
    right = f1.filter(pl.col("ts_event") <= t).select("ts_event", *cols)
    # every real bar at or before t survives; filled rows just before t exist only if the next
    # real bar does (a live system fills them when that bar arrives), so compare shared rows
    real = left.filter(~pl.col("is_filled"))["ts_event"]
    assert real.is_in(right["ts_event"].implode()).all()
    joined = left.join(right, on="ts_event", how="inner", suffix="_p")
    assert joined.height >= real.len() > 0
    for c in cols:
        assert joined[c].equals(joined[f"{c}_p"], check_names=False), c


@SETTINGS
@given(frac=st.floats(0.05, 0.9), seed=st.integers(0, 2**16))
def test_targets_at_t_depend_only_on_bars_after_t(frac, seed):
    b = bars()
    f0 = base()
    real = f0.filter(~pl.col("is_filled"))["ts_event"].sort()
    t = real[int(frac * (real.len() - 1))]  # a real bar, so no row from t on carries an older close
    ys = [f"y_{h}" for h in range(1, 6)]
    # bars strictly before t changed: targets from t on are bit-identical
    f1 = build_features(_perturb(b, pl.col("ts_event") < t, seed, drop=False))
    a = f0.filter(pl.col("ts_event") >= t).select("ts_event", *ys)
    p = f1.filter(pl.col("ts_event") >= t).select("ts_event", *ys)
    assert a.equals(p)
    # the close of the next bar changed: the horizon-1 target at t moves
    real_ts = b["ts_event"]
    nxt_real = (pl.col("ts_event") + pl.duration(minutes=1)).is_in(real_ts.implode())
    row = f0.filter((pl.col("ts_event") >= t) & pl.col("y_1").is_not_null() & nxt_real).head(1)
    if row.height == 0:
        return
    t0 = row["ts_event"][0]
    nxt = pl.col("ts_event") == t0 + pl.duration(minutes=1)
    bumped = b.with_columns(
        [pl.when(nxt).then(pl.col(c) * 1.001).otherwise(pl.col(c)) for c in PRICES]
    )
    f2 = build_features(bumped)
    assert f2.filter(pl.col("ts_event") == t0)["y_1"][0] != row["y_1"][0]


def test_features_on_the_first_k_days_equal_the_same_rows_on_all_days():
    b = make_continuous(
        days=4, roots=("ES", "ZN"), roll_after_day=1, session_fraction=0.4, constant_minutes=30
    )
    full = build_features(b)
    # the trade-date partitioned path, one date per run as dates arrive, gives the same table
    assert features_by_date(b, step_days=1).equals(full.sort("root", "ts_event"))
    dates = b.select(trade_date_expr().unique().sort()).to_series().to_list()
    for k in (2, 3):
        head = b.filter(trade_date_expr() <= dates[k - 1])
        part = build_features(head)
        assert part.height > 0
        same = full.join(part.select("ts_event", "root"), on=["ts_event", "root"], how="semi")
        assert same.height == part.height
        cols = _inputs(part)
        assert same.select("root", "ts_event", *cols).equals(part.select("root", "ts_event", *cols))
        # targets agree wherever the truncated table has them (it lacks the bars after its end)
        ys = [c for c in part.columns if c.startswith("y_")]
        j = part.select("root", "ts_event", *ys).join(
            same.select("root", "ts_event", *ys), on=["root", "ts_event"], suffix="_f"
        )
        for y in ys:
            known = j.filter(pl.col(y).is_not_null())
            assert known[y].equals(known[f"{y}_f"], check_names=False)
