"""Does the decay check find a regime change, and only a regime change? (issue 38)

Per seed, ``generate(days=30, roots)`` twice through the real data path (DBN decode ->
continuous -> features), once plain and once with ``break_at`` = the first of the last
``--live-days`` full trade dates (the generator's predictable components off from there; the
files before it are byte for byte the plain run's). The champion is ``foxhunt-lightgbm``
trained at the demo profile's sizes on the dates before the break (the same for both
histories), judged by the walk-forward protocol of the demo profile (its folds x test
dates) on them: its pooled test bars are the backtest. It then goes live on the last dates:
each is forecast as ``champion_forecasts`` does (``forecast_date``), the ``realised`` view
gives the live P&L, and the checks of ``live_performance`` and ``champion_forecasts`` run
with their default thresholds (``DecayThresholds``: CUSUM level calibrated for a 5%
false-alarm rate over 20 live days; drift: a date warns when more features drift than on any
of the 20 reference dates, leave one date out).

    nice python benchmarks/decay_detection.py [--days 30] [--seeds 7,8,9] [--live-days 5]
        [--roots ES,ZN]

Prints per seed and history: the oracle's Sharpe after costs on the live dates (the edge
that was there to find), the champion's live Sharpe beside its walk-forward band for that
many days, the decay verdict (detection delay in live trade dates and bars, or none), the
CUSUM's peak against its level, that level's false-alarm rate over as many bars (block
bootstrap of the test bars), and the drift warnings per date; then the totals: detections
within the live dates with a break, false alarms without.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, date, datetime
from pathlib import Path

import numpy as np
import polars as pl
from upath import UPath

try:
    from tests.features_fixtures import write_by_date
    from tests.walk_forward_data import continuous_from
except ModuleNotFoundError:  # run as a script: the repository root is not on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.features_fixtures import write_by_date
    from tests.walk_forward_data import continuous_from

from foxhunt_pipeline.config.profiles import PROFILES
from foxhunt_pipeline.features import build_features
from foxhunt_pipeline.features.dataset import DatasetConfig, build_training_dataset
from foxhunt_pipeline.features.grid import trade_date_expr, trade_dates
from foxhunt_pipeline.forecasting.daily import forecast_date
from foxhunt_pipeline.forecasting.frame import ForecastModel
from foxhunt_pipeline.forecasting.reference import date_drift, decay_threshold, test_pnl
from foxhunt_pipeline.serving.loaded import LoadedModel
from foxhunt_pipeline.storage import forecast_views
from foxhunt_pipeline.synthetic import generate, oracle_summary
from models.evaluation.candidates import lightgbm_candidate
from models.evaluation.row_pool import row_pool
from models.evaluation.walk_forward import WalkForwardConfig, walk_forward
from models.export import forecaster_metadata
from models.lightgbm import LightGBMConfig, fit, save_lightgbm
from models.monitoring import band, decay, drift, live

DEMO = PROFILES["demo"]


def full_dates(features: pl.DataFrame) -> list[date]:
    """Trade dates with at least half the median bars (a partial last session is dropped)."""
    per = features.group_by(trade_date_expr().alias("d")).len().sort("d")
    half = 0.5 * float(per["len"].median())
    return per.filter(pl.col("len") >= half)["d"].to_list()


def history(workdir: Path, days: int, roots: tuple[str, ...], seed: int,
            break_at: date | None) -> tuple[pl.DataFrame, pl.DataFrame, Path]:
    """(continuous bars, features, landing) of one generated history."""
    landing = workdir / "landing"
    files = generate(landing, days=days, roots=roots, seed=seed, break_at=break_at)
    continuous = continuous_from(files, workdir)
    return continuous, build_features(continuous), landing


def champion(features: pl.DataFrame, continuous: pl.DataFrame, before: date, out: Path):
    """foxhunt-lightgbm trained on the dates before ``before`` at the demo sizes, its
    artifact, its costs per root and its walk-forward test bars (root, ts_event, pnl)."""
    pre = features.filter(trade_date_expr() < before)
    data = build_training_dataset(pre, DatasetConfig(fee_per_contract=1.0),
                                  close_prices=continuous.filter(trade_date_expr() < before))
    config = LightGBMConfig(fit_quantiles=tuple(DEMO["lightgbm"]["fit_quantiles"]),
                            num_boost_round=DEMO["lightgbm"]["num_boost_round"],
                            max_train_rows=DEMO["lightgbm"]["max_train_rows"])
    artifact = save_lightgbm(fit(data, config), out, metadata=forecaster_metadata(
        data.meta, model="lightgbm", precision="fp32", lightgbm_config=config.to_dict()))
    wf = DEMO["walk_forward"]
    result = walk_forward(row_pool(data, trade_dates), [lightgbm_candidate(config)],
                          WalkForwardConfig(folds=wf["folds"], test_days=wf["test_days"],
                                            validation_days=wf["validation_days"]),
                          n_compared=10, bootstrap=200)
    bars = result.candidates["foxhunt-lightgbm"].bars
    frame = pl.DataFrame({"root": np.asarray(bars.root, str), "pnl": bars.pnl,
                          "ts_event": pl.Series(np.asarray(bars.ts, np.int64)).cast(
                              pl.Datetime("ns", "UTC"))})
    costs = dict(zip(data.meta["roots"], data.meta["cost_log_return"], strict=True))
    return artifact, costs, frame, float(data.meta["bars_per_year"]), result


def go_live(workdir: Path, features: pl.DataFrame, fm: ForecastModel, costs: dict,
            test: pl.DataFrame, per_year: float, live_dates: list[date]) -> dict:
    """The last dates forecast one by one as the asset does, then the checks."""
    root = UPath(workdir / "warehouse")
    write_by_date(root, "features", features)
    t0 = time.perf_counter()
    made = datetime(2030, 1, 1, tzinfo=UTC)
    for d in live_dates:
        forecast_date(root, d, fm, costs, made)
    seconds = (time.perf_counter() - t0) / len(live_dates)
    globs = {t: str(root / t / "trade_date=*" / "*.parquet") for t in
             (forecast_views.TABLE, "features")}
    real = forecast_views.realised_frame(globs[forecast_views.TABLE], globs["features"],
                                         live_dates[0], live_dates[-1]).sort("ts_event")
    bars = live.LiveBars(real["trade_date"].cast(pl.String).to_numpy(), real["root"].to_numpy(),
                         real["pnl"].fill_null(np.nan).to_numpy(),
                         real["forecast"].fill_null(np.nan).to_numpy(),
                         real["realised_return"].fill_null(np.nan).to_numpy(),
                         real["pinball"].fill_null(np.nan).to_numpy())
    th = decay.DecayThresholds()
    pnl = test_pnl(test)
    refs = decay.references(pnl)
    h = decay_threshold(root, fm.model, fm.version, test, th)
    found = decay.detect(bars.pnl, bars.root, refs, h, th)
    used = np.isfinite(bars.pnl)
    far = decay.false_alarm_rate(decay.in_control_steps(
        pnl, bars.root[used], refs, th.k_fraction, 400, np.random.default_rng(1)), h)
    days, counts = live.live_bar_counts(bars)
    b = band.rolling_band(pnl, counts, days, per_year, resamples=400)
    day_of_bar = bars.day[used][np.isin(bars.root[used], list(refs))]
    alarm_day = None if found.first_alarm is None else str(day_of_bar[found.first_alarm])
    reports = [date_drift(root, fm, costs, live_dates[0], d, real.filter(pl.col("trade_date") == d),
                          drift.DriftThresholds()) for d in live_dates]
    feature_warns = [f.warn for f, _ in reports]
    prediction_warns = [p.warn for _, p in reports]
    m = live.metrics(bars, per_year)
    return {"alarm_day": alarm_day, "delay_days": None if alarm_day is None else
            [str(d) for d in live_dates].index(alarm_day) + 1,
            "delay_bars": None if found.first_alarm is None else found.first_alarm + 1,
            "bars": found.bars, "peak": found.peak, "level": h, "far": far,
            "sharpe": m["sharpe"], "ic": m["ic"], "band": b.sharpe[-1],
            "feature_warns": sum(feature_warns), "prediction_warns": sum(prediction_warns),
            "forecast_seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--seeds", default="7,8,9")
    ap.add_argument("--live-days", type=int, default=5)
    ap.add_argument("--roots", default="ES,ZN")
    args = ap.parse_args()
    roots = tuple(r.strip() for r in args.roots.split(","))
    totals = {"found": 0, "breaks": 0, "false": 0, "plain": 0}
    for seed in (int(s) for s in args.seeds.split(",")):
        with tempfile.TemporaryDirectory(prefix="decay-") as tmp:
            t0 = time.perf_counter()
            plain_cont, plain_feat, plain_landing = history(Path(tmp) / "plain", args.days,
                                                            roots, seed, None)
            live_dates = full_dates(plain_feat)[-args.live_days:]
            brk = live_dates[0]
            broke_cont, broke_feat, broke_landing = history(Path(tmp) / "break", args.days,
                                                            roots, seed, brk)
            artifact, costs, test, per_year, _ = champion(plain_feat, plain_cont, brk,
                                                          Path(tmp) / "artifact")
            fm = ForecastModel(LoadedModel.load(artifact), "foxhunt-lightgbm", "1", "lightgbm")
            print(f"seed {seed}: live {live_dates[0]} .. {live_dates[-1]} "
                  f"({len(live_dates)} trade dates; --break-at {brk}); champion trained and "
                  f"judged on the {len(full_dates(plain_feat)) - len(live_dates)} dates before "
                  f"({time.perf_counter() - t0:.0f}s)")
            for name, feats, landing in (("no break", plain_feat, plain_landing),
                                         ("break", broke_feat, broke_landing)):
                r = go_live(Path(tmp) / name.replace(" ", "_"), feats, fm, costs, test,
                            per_year, live_dates)
                oracle = oracle_summary(landing, start=live_dates[0], end=live_dates[-1])
                o = oracle["pooled"]["sharpe"] if oracle else None
                verdict = (f"DECAY on live day {r['delay_days']} ({r['alarm_day']}, after "
                           f"{r['delay_bars']} bars)" if r["alarm_day"] else "no decay alarm")
                print(f"  {name:8s}: oracle Sharpe {'-' if o is None else f'{o:.1f}'}; "
                      f"live Sharpe {r['sharpe']:.1f} (walk-forward band 5-95%: "
                      f"{r['band'][0]:.1f} .. {r['band'][2]:.1f}), IC {r['ic']:.3f}; {verdict}; "
                      f"CUSUM peak {r['peak']:.1f} / level {r['level']:.1f} (false-alarm rate "
                      f"over {r['bars']} bars {r['far']:.1%}); drift warnings feature "
                      f"{r['feature_warns']}/{len(live_dates)}, prediction "
                      f"{r['prediction_warns']}/{len(live_dates)}; forecast "
                      f"{r['forecast_seconds']:.1f}s per date")
                if name == "break":
                    totals["breaks"] += 1
                    totals["found"] += int(r["alarm_day"] is not None)
                else:
                    totals["plain"] += 1
                    totals["false"] += int(r["alarm_day"] is not None)
    print(f"detected {totals['found']}/{totals['breaks']} breaks within {args.live_days} live "
          f"dates; false alarms {totals['false']}/{totals['plain']} histories without a break")


if __name__ == "__main__":
    main()
