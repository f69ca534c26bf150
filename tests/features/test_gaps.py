"""Missing sessions are holes (issue 24): on real minute bars with a two-week hole inside one
contract, no features row has a target or a return computed across it, while the daily halt
between two consecutive sessions is no hole; generated data (no missing session) is cut
nowhere."""

from __future__ import annotations

from datetime import date

import numpy as np
import polars as pl
from upath import UPath

from foxhunt_pipeline.features import FeatureConfig, by_date
from foxhunt_pipeline.features.grid import regular_grid, trade_date_expr
from foxhunt_pipeline.features.schema import validate_features
from foxhunt_pipeline.ingest.decode import ingest_dbn_file
from foxhunt_pipeline.instruments.sessions import missing_between, stretch_numbers
from foxhunt_pipeline.storage import continuous_dates, trade_dates
from foxhunt_pipeline.storage.warehouse import raw_bars_partition_path
from tests.real_dbn import JAN26, JULY, MAY, write_real

# small windows, so 30 real minutes are more than the warm-up (15 bars)
SMALL = FeatureConfig(windows=(3, 5), return_horizons=(1, 2, 3), return_lags=2)


def _home(tmp_path) -> UPath:
    """Real files as landed, plus the July file again one day later (the next session: no
    hole) and fourteen days later (ESU4 still trading: a hole inside one contract)."""
    landing = tmp_path / "landing"
    landing.mkdir()
    files = [landing / n for n in (JULY, MAY, JAN26)]
    for f in files:
        f.write_bytes((UPath(__file__).parents[1] / "data" / "dbn" / f.name).read_bytes())
    files += [write_real(landing / "next-session.dbn.zst", shift_days=1),
              write_real(landing / "two-weeks-later.dbn.zst", shift_days=14)]
    root = UPath(tmp_path / "warehouse")
    for f in files:
        ingest_dbn_file(f, raw_bars_partition_path(root.path, f.name), source_file=f.name)
    days = continuous_dates.all_dates(root)
    continuous_dates.build_dates(root, days)
    by_date.build_dates(root, days[0], days[-1], SMALL, validate=lambda f: validate_features(f).passed)
    return root


def _stretch_of(frame: pl.DataFrame) -> pl.DataFrame:
    dated = frame.with_columns(_td=trade_date_expr())
    return dated.join(stretch_numbers(dated), on=["root", "_td"], how="left", maintain_order="left")


def test_no_target_or_return_spans_a_missing_session_on_real_files(tmp_path):
    root = _home(tmp_path)
    feats = trade_dates.read_dates(root, by_date.TABLE).sort("root", "ts_event")
    bars = trade_dates.read_dates(root, continuous_dates.TABLE).sort("root", "ts_event")
    grid = _stretch_of(regular_grid(bars)).with_columns(
        _i=pl.int_range(pl.len()).over("root", "contract_seq"))
    rows = feats.join(grid.select("root", "ts_event", "close", "_td", "_stretch", "_i", "contract_seq"),
                      on=["root", "ts_event", "contract_seq"], how="left")
    assert rows["_i"].null_count() == 0 and rows.height > 0
    hole = missing_between("ES", np.array(["2024-07-03"], "datetime64[D]"), np.array(["2024-07-16"], "datetime64[D]"))
    assert hole[0] > 0  # the fourteen-day move is a hole inside ESU4's segment
    assert bars.filter(pl.col("symbol") == "ESU4")["contract_seq"].n_unique() == 1

    for (r, seq), g in grid.partition_by("root", "contract_seq", as_dict=True).items():
        mine = rows.filter((pl.col("root") == r) & (pl.col("contract_seq") == seq))
        if mine.is_empty():
            continue
        i = mine["_i"].to_numpy()
        stretch = g["_stretch"].to_numpy()
        close = g["close"].to_numpy()
        # every feature looks back at most the warm-up: those bars are in the row's stretch
        assert (i >= SMALL.warmup_bars).all()
        assert (stretch[i - SMALL.warmup_bars] == stretch[i]).all(), (r, seq)
        for h in range(1, SMALL.horizons + 1):
            y = mine[f"y_{h}"].to_numpy().astype(np.float64)
            ahead = np.minimum(i + h, g.height - 1)
            inside = (i + h < g.height) & (stretch[ahead] == stretch[i])
            assert np.isnan(y[~inside]).all(), (r, seq, h)  # null where t+h is past a hole or the end
            np.testing.assert_allclose(y[inside], np.log(close[ahead[inside]] / close[i[inside]]), rtol=1e-5)
    # the hole is real and the halt is not one: ESU4 has rows on both sides of the hole, and
    # targets across the daily halt between the first two sessions
    es = rows.filter(pl.col("symbol") == "ESU4")
    assert es["_stretch"].n_unique() == 2
    first = es.filter(pl.col("_stretch") == es["_stretch"].min())
    assert first["_td"].n_unique() == 2 and first.filter(pl.col("_td") == first["_td"].min())["y_5"].null_count() == 0


def test_generated_sessions_are_one_stretch_across_weekends_and_holidays(tmp_path):
    """The generator closes exactly the calendar's holidays, so its data has no hole: the
    gap rule leaves generated features as they were (July 4th and a weekend inside)."""
    from foxhunt_pipeline.ingest.decode import ingest_dbn_file
    from foxhunt_pipeline.synthetic.generate import generate

    files = generate(tmp_path / "landing", days=6, roots=("ES", "GC"), start=date(2024, 7, 2), seed=4)
    frames = []
    for f in files:
        dest = tmp_path / "raw" / f"{f.name}.parquet"
        ingest_dbn_file(f, dest, source_file=f.name)
        frames.append(pl.read_parquet(dest, columns=["ts_event", "root"]))
    dated = pl.concat(frames).with_columns(_td=trade_date_expr())
    numbers = stretch_numbers(dated)
    assert numbers["_td"].n_unique() >= 4
    assert numbers["_stretch"].max() == 0
