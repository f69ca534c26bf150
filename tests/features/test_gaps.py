"""Holes in the data (issues 24 and 39): on real minute bars with a two-week hole inside one
contract, and real fragments of a session a day apart (hours of the open session between
them without a bar), no features row has a target or a return computed across a hole;
generated data (no missing session, no outage) is cut nowhere."""

from __future__ import annotations

from datetime import date

import numpy as np
import polars as pl
from upath import UPath

from foxhunt_pipeline.features import FeatureConfig, by_date
from foxhunt_pipeline.features.grid import regular_grid, trade_date_expr
from foxhunt_pipeline.features.schema import validate_features
from foxhunt_pipeline.ingest.decode import ingest_dbn_file
from foxhunt_pipeline.instruments.rolls import build_continuous
from foxhunt_pipeline.instruments.sessions import missing_between, new_stretch
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


def _grid(bars: pl.DataFrame) -> pl.DataFrame:
    """The bars on their grid, each row with its stretch (``instruments.sessions``)."""
    with_stretch = bars.with_columns(_stretch=pl.Series(np.cumsum(new_stretch(bars)), dtype=pl.Int32))
    return regular_grid(with_stretch).with_columns(_td=trade_date_expr())


def check_nothing_spans_a_hole(root: UPath, cfg: FeatureConfig = SMALL) -> pl.DataFrame:
    """Every stored features row, on the grid of the stored bars cut into stretches: no
    feature looks back past its stretch's start and every target is that of its stretch (null
    where t+h lies past a hole or the end). Returns the rows with ``_stretch``, ``_td``, ``_i``."""
    feats = trade_dates.read_dates(root, by_date.TABLE).sort("root", "ts_event")
    bars = trade_dates.read_dates(root, continuous_dates.TABLE).sort("root", "ts_event")
    grid = _grid(bars).with_columns(
        _i=pl.int_range(pl.len()).over("root", "contract_seq"))
    rows = feats.join(grid.select("root", "ts_event", "close", "_td", "_stretch", "_i", "contract_seq"),
                      on=["root", "ts_event", "contract_seq"], how="left")
    assert rows["_i"].null_count() == 0 and rows.height > 0
    for (r, seq), g in grid.partition_by("root", "contract_seq", as_dict=True).items():
        mine = rows.filter((pl.col("root") == r) & (pl.col("contract_seq") == seq))
        if mine.is_empty():
            continue
        i = mine["_i"].to_numpy()
        stretch = g["_stretch"].to_numpy()
        close = g["close"].to_numpy()
        # every feature looks back at most the warm-up: those bars are in the row's stretch
        assert (i >= cfg.warmup_bars).all()
        assert (stretch[i - cfg.warmup_bars] == stretch[i]).all(), (r, seq)
        for h in range(1, cfg.horizons + 1):
            y = mine[f"y_{h}"].to_numpy().astype(np.float64)
            ahead = np.minimum(i + h, g.height - 1)
            inside = (i + h < g.height) & (stretch[ahead] == stretch[i])
            assert np.isnan(y[~inside]).all(), (r, seq, h)  # null where t+h is past a hole or the end
            np.testing.assert_allclose(y[inside], np.log(close[ahead[inside]] / close[i[inside]]), rtol=1e-5)
    return rows


def test_no_target_or_return_spans_a_missing_session_on_real_files(tmp_path):
    root = _home(tmp_path)
    rows = check_nothing_spans_a_hole(root)
    bars = trade_dates.read_dates(root, continuous_dates.TABLE)
    hole = missing_between("ES", np.array(["2024-07-03"], "datetime64[D]"), np.array(["2024-07-16"], "datetime64[D]"))
    assert hole[0] > 0  # the fourteen-day move is a hole inside ESU4's segment
    assert bars.filter(pl.col("symbol") == "ESU4")["contract_seq"].n_unique() == 1
    # the holes are real: ESU4 has rows in three stretches, the July fragment, the next
    # session's (some 21 open hours later) and the one two weeks on, and the last 5 rows
    # of each have no 5-bar target
    es = rows.filter(pl.col("symbol") == "ESU4")
    assert es["_stretch"].n_unique() == 3
    for _, part in es.group_by("_stretch"):
        assert part.sort("ts_event")["y_5"].tail(5).null_count() == 5


def test_generated_sessions_are_one_stretch_across_weekends_and_holidays(tmp_path):
    """The generator closes exactly the calendar's holidays and early closes, so its data
    has no hole: the gap rule leaves generated features as they were (July 4th, the early
    close before it and a weekend inside)."""
    from foxhunt_pipeline.ingest.decode import ingest_dbn_file
    from foxhunt_pipeline.synthetic.generate import generate

    files = generate(tmp_path / "landing", days=6, roots=("ES", "GC"), start=date(2024, 7, 2), seed=4)
    frames = []
    for f in files:
        dest = tmp_path / "raw" / f"{f.name}.parquet"
        ingest_dbn_file(f, dest, source_file=f.name)
        frames.append(pl.read_parquet(dest))
    bars, _ = build_continuous(pl.concat(frames).lazy())
    assert bars.with_columns(_td=trade_date_expr())["_td"].n_unique() >= 4
    starts = new_stretch(bars)
    assert starts.sum() == bars.select("root", "contract_seq").n_unique(), \
        bars.filter(pl.Series(starts)).select("root", "ts_event")
