"""build_features: the default feature set, warm-up, zero variance, rolls, inputs, targets."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import polars as pl
import pytest

from foxhunt_pipeline.features import (
    KNOWN_NAMES,
    STATIC_NAMES,
    FeatureConfig,
    FeatureInputError,
    build_features,
    feature_names,
    output_columns,
)
from foxhunt_pipeline.features.grid import regular_grid
from foxhunt_pipeline.features.static_inputs import static_values
from foxhunt_pipeline.instruments.specs import ROOTS
from tests.features_fixtures import make_continuous

CFG = FeatureConfig()


@lru_cache(maxsize=1)
def bars() -> pl.DataFrame:
    return make_continuous(days=3, roots=("ES", "ZN"), roll_after_day=1, constant_minutes=400)


@lru_cache(maxsize=1)
def feats() -> pl.DataFrame:
    return build_features(bars())


def test_default_set_has_about_240_float32_features_in_named_groups():
    names = feature_names(CFG)
    assert 230 <= len(names) <= 260
    assert len(set(names)) == len(names)
    f = feats()
    assert f.columns == output_columns(CFG)
    for c in f.columns:
        if c.startswith(("f_", "k_", "s_", "y_")):
            assert f.schema[c] == pl.Float32, c
    assert len(KNOWN_NAMES) >= 10 and len(STATIC_NAMES) >= 5


def test_every_input_is_finite_after_warm_up_including_a_constant_price_stretch():
    f = feats()
    x = f.select(pl.selectors.starts_with("f_", "k_", "s_")).to_numpy()
    assert np.isfinite(x).all()
    # the constant stretch (400 flat minutes at the start) reaches past the 250-bar warm-up
    w = CFG.warmup_bars
    flat = f.filter((pl.col("root") == "ES") & (pl.col("contract_seq") == 0)).head(400 - w)
    assert flat.height > 0
    assert (flat["f_ret_std_20"] == 0).all() and (flat["f_vol_yz_240"] == 0).all()
    assert (flat["f_stoch_k_20"] == 0.5).all()


def test_warm_up_rows_are_dropped_per_contract():
    f = feats()
    g = regular_grid(bars())
    w = CFG.warmup_bars
    for (root, seq), part in g.group_by("root", "contract_seq"):
        got = f.filter((pl.col("root") == root) & (pl.col("contract_seq") == seq))
        assert got.height == part.height - w
        assert got["ts_event"].min() == part.sort("ts_event")["ts_event"][w]


def test_groups_are_switchable():
    cfg = FeatureConfig(groups=("returns", "volume"))
    f = build_features(bars().filter(pl.col("root") == "ES"), cfg)
    fcols = [c for c in f.columns if c.startswith("f_")]
    assert fcols == feature_names(cfg)
    assert any(c.startswith("f_vwap_dev") for c in fcols)
    assert not any(c.startswith("f_rsi") for c in fcols)
    with pytest.raises(ValueError, match="unknown feature groups"):
        FeatureConfig(groups=("returns", "astrology"))


def test_features_do_not_depend_on_the_previous_contract():
    """Rescaling every price of contract 0 by 1.3 leaves every column of contract 1
    bit-identical: nothing spans the roll."""
    b = bars().filter(pl.col("root") == "ES")
    c0 = pl.col("contract_seq") == 0
    moved = b.with_columns(
        [
            pl.when(c0).then(pl.col(c) * 1.3).otherwise(pl.col(c))
            for c in ("open", "high", "low", "close")
        ]
    )
    a = build_features(b).filter(pl.col("contract_seq") == 1)
    m = build_features(moved).filter(pl.col("contract_seq") == 1)
    assert m.height == a.height > 0
    assert m.equals(a)


def test_returns_and_targets_are_log_returns_within_one_contract():
    g = regular_grid(bars()).filter(pl.col("root") == "ZN").with_columns(lc=pl.col("close").log())
    f = (
        feats()
        .filter(pl.col("root") == "ZN")
        .join(g.select("ts_event", "lc", "contract_seq"), on=["ts_event", "contract_seq"])
    )
    seg = f.filter(pl.col("contract_seq") == 0)
    lc = seg["lc"].to_numpy()
    np.testing.assert_allclose(seg["f_ret_1b"].to_numpy()[1:], np.diff(lc), atol=1e-7)
    for h in range(1, 6):
        y = seg[f"y_{h}"].to_numpy()
        np.testing.assert_allclose(y[:-h], lc[h:] - lc[:-h], atol=1e-7)
        assert np.isnan(y[-h:]).all() and seg[f"y_{h}"].null_count() == h


def test_static_inputs_come_from_the_root_table():
    f = feats()
    for root in ("ES", "ZN"):
        row = f.filter(pl.col("root") == root).row(0, named=True)
        for k, v in static_values(root).items():
            assert row[k] == pytest.approx(v, rel=1e-6)
    assert f.filter(pl.col("root") == "ZN")["s_log_tick_size"][0] == pytest.approx(
        math.log(ROOTS["ZN"].tick_size), rel=1e-6
    )


def test_known_inputs_follow_the_clock_and_the_calendar():
    from foxhunt_pipeline.features.calendar_inputs import with_known_inputs
    from foxhunt_pipeline.features.grid import session_minute_expr, trade_date_expr
    from tests.features_fixtures import session_minutes

    rows = []
    for day in (__import__("datetime").date(2024, 7, 3), __import__("datetime").date(2024, 7, 5)):
        ts = session_minutes(day)
        rows.append(pl.DataFrame({"ts_event": ts}))
    df = pl.concat(rows).with_columns(
        expiry=pl.date(2024, 9, 20), _td=trade_date_expr(), _sm=session_minute_expr()
    )
    k = with_known_inputs(df, "ES")
    jul3 = k.filter(pl.col("_td") == pl.date(2024, 7, 3))
    jul5 = k.filter(pl.col("_td") == pl.date(2024, 7, 5))
    assert (jul3["k_early_close"] == 1).all() and (jul3["k_pre_holiday"] == 1).all()
    assert (jul5["k_early_close"] == 0).all() and (jul5["k_post_holiday"] == 1).all()
    # 12:00 CT early close on 2024-07-03: the 11:59 CT bar is one minute before the close
    last = jul3.filter(pl.col("ts_event") == pl.datetime(2024, 7, 3, 16, 59, time_zone="UTC"))
    assert last["k_session_remaining_frac"][0] == pytest.approx(1 / 1380, rel=1e-5)
    # the session opens at 17:00 CT: minute of day 17*60
    first = jul5.head(1)
    assert first["k_minute_of_day_sin"][0] == pytest.approx(
        math.sin(2 * math.pi * 1020 / 1440), abs=1e-6
    )
    assert first["k_session_elapsed_frac"][0] == 0.0
    assert first["k_day_of_week_sin"][0] == pytest.approx(math.sin(2 * math.pi * 4 / 7), abs=1e-6)
    assert k["k_log_days_to_expiry"].min() > 0


@pytest.mark.parametrize("root", ["ES", "ZN", "CL", "GC"])
def test_the_session_table_cut_from_whole_years_equals_one_of_the_range(root):
    """``session_table`` cuts its rows out of whole calendar years computed once: every row
    of [first, last] (all that ``with_known_inputs`` joins) equals that of a table computed
    for the range alone, holiday neighbours included."""
    from datetime import date, timedelta

    from foxhunt_pipeline.features.calendar_inputs import session_rows, session_table
    from foxhunt_pipeline.instruments.sessions import calendar_name

    week = timedelta(days=7)
    for first, last in [(date(2024, 7, 1), date(2024, 7, 8)), (date(2023, 12, 20), date(2024, 1, 10)),
                        (date(2024, 11, 25), date(2024, 12, 31)), (date(2024, 3, 29), date(2024, 3, 29))]:
        cut = session_table(root, first, last)
        alone = session_rows(calendar_name(root), first - week, last + week)
        assert cut["_td"].equals(alone["_td"])
        inside = pl.col("_td").is_between(first, last)
        assert cut.filter(inside).height and cut.filter(inside).equals(alone.filter(inside))


def test_a_root_with_too_few_bars_errors_or_is_skipped():
    b = pl.concat(
        [bars().filter(pl.col("root") == "ES"), bars().filter(pl.col("root") == "ZN").head(100)]
    )
    with pytest.raises(FeatureInputError, match=r"root ZN has 100 bars.*warm-up of 250"):
        build_features(b)
    with pytest.warns(UserWarning, match="root ZN has 100 bars"):
        f = build_features(b, FeatureConfig(min_rows_policy="skip"))
    assert f["root"].unique().to_list() == ["ES"]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b.drop("expiry"), "lacks columns"),
        (
            lambda b: b.with_columns(
                close=pl.when(pl.int_range(pl.len()) == 5).then(None).otherwise(pl.col("close"))
            ),
            "row 5",
        ),
        (lambda b: b.with_columns(low=pl.col("high") + 1), "high < low"),
        (lambda b: pl.concat([b, b.head(2)]), "sharing"),
        (lambda b: b.with_columns(pl.col("contract_seq").cast(pl.Int64)), "contract_seq"),
    ],
)
def test_bad_input_is_a_clear_error(mutate, message):
    with pytest.raises(FeatureInputError, match=message):
        build_features(mutate(bars().filter(pl.col("root") == "ES")))
