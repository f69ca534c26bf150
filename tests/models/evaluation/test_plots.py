"""Charts that can be read: equity per root on its own time axis (no line jumps back from
ES's end to ZN's start), the walk-forward folds shaded, the fan chart titled with its root
and horizon."""

from pathlib import Path

import numpy as np
import pytest
from matplotlib.dates import date2num

from models.evaluation.candidates import trading_baselines
from models.evaluation.plots import (
    FoldSpan,
    equity_by_root,
    equity_figure,
    fold_spans,
    quantile_fan_figure,
    walk_forward_equity,
)
from models.evaluation.row_pool import row_pool
from models.evaluation.walk_forward import WalkForwardConfig, walk_forward
from tests.model_data import synthetic_training_data

MIN = 60 * 10**9
T0 = 1_704_067_200 * 10**9  # 2024-01-01T00:00Z


def _two_roots(n: int = 50):
    """Bars stored as the datasets store them: every ES bar, then every ZN bar, same hours."""
    ts = np.concatenate([T0 + np.arange(n) * MIN, T0 + np.arange(n) * MIN])
    roots = np.array(["ES"] * n + ["ZN"] * n)
    pnl = {"model": np.r_[np.full(n, 1e-4), np.full(n, -1e-4)], "baseline:flat": np.zeros(2 * n)}
    return pnl, roots, ts


def test_equity_is_one_series_per_root_and_model_in_time_order():
    pnl, roots, ts = _two_roots()
    assert np.any(np.diff(ts) < 0)  # joined into one line, this would jump back in time
    rng = np.random.default_rng(0)
    perm = rng.permutation(ts.size)  # any bar order gives the same curves
    for order in (np.arange(ts.size), perm):
        series = equity_by_root({k: v[order] for k, v in pnl.items()}, roots[order], ts[order])
        assert set(series) == {"ES", "ZN"}
        for root, curves in series.items():
            assert set(curves) == {"model", "baseline:flat"}
            x, eq = curves["model"]
            assert x.size == 50 and np.all(np.diff(x) > 0)
            assert eq[-1] == pytest.approx(50e-4 if root == "ES" else -50e-4)
    by_index = equity_by_root(pnl, roots)  # no timestamps: bar index per root
    assert np.array_equal(by_index["ZN"]["model"][0], np.arange(50))


def test_equity_figure_has_a_panel_per_root_and_shades_each_fold():
    pnl, roots, ts = _two_roots()
    folds = [FoldSpan(1, T0, T0 + 24 * MIN), FoldSpan(2, T0 + 25 * MIN, T0 + 49 * MIN)]
    fig = equity_figure(pnl, roots=roots, ts_ns=ts, folds=folds, title="m vs baselines")
    assert [ax.get_title().split(":")[0] for ax in fig.axes] == ["ES", "ZN"]
    for ax in fig.axes:
        for line in ax.get_lines()[:2]:  # the two models (then the zero line)
            assert np.all(np.diff(date2num(line.get_xdata())) > 0)
        spans = sorted((p for p in ax.patches if str(p.get_gid()).startswith("fold")),
                       key=lambda p: p.get_gid())
        assert [p.get_gid() for p in spans] == ["fold 1", "fold 2"]
        for p, f in zip(spans, folds, strict=True):
            x0, x1 = p.get_x(), p.get_x() + p.get_width()
            want = date2num(np.array([f.start_ns, f.end_ns], dtype="datetime64[ns]"))
            assert (x0, x1) == pytest.approx(tuple(want))


def test_walk_forward_equity_per_root_with_the_folds_of_the_result(tmp_path: Path):
    data = synthetic_training_data(
        n_rows={"train": 1200, "validation": 350, "test": 350}, n_observed=2, n_known=2,
        n_static=2, lookback=8, horizon=2, segment_length=175, seed=5)
    pool = row_pool(data, lambda ts: np.asarray(ts) // (6 * 3600 * 10**9))
    res = walk_forward(pool, trading_baselines((1,)), WalkForwardConfig(folds=3, test_days=1),
                       bootstrap=50)
    first = next(iter(res.candidates.values()))
    spans = fold_spans(first.folds)
    assert [s.number for s in spans] == [1, 2, 3]
    assert all(a.end_ns < b.start_ns for a, b in zip(spans, spans[1:], strict=False))
    series = equity_by_root({k: c.bars.pnl for k, c in res.candidates.items()}, first.bars.root,
                            first.bars.ts)
    assert set(series) == {"ES", "ZN"}
    for curves in series.values():
        x, _ = curves["baseline:flat"]
        assert np.all(np.diff(x) > 0) and spans[0].start_ns <= x[0] and x[-1] <= spans[-1].end_ns
    png = walk_forward_equity(tmp_path / "wf.png", res, title="wf")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fan_chart_panels_are_titled_with_root_and_horizon():
    n, qs = 40, [0.1, 0.5, 0.9]
    ts = np.concatenate([T0 + np.arange(n) * MIN, T0 + np.arange(n) * MIN])
    roots = np.array(["ES"] * n + ["ZN"] * n)
    med = np.linspace(-1, 1, 2 * n)
    qf = np.stack([med - 1, med, med + 1], axis=1)
    fig = quantile_fan_figure(qf, med, qs, roots=roots, horizon=5, ts_ns=ts, max_bars=30,
                              title="tft")
    titles = [ax.get_title() for ax in fig.axes]
    assert len(titles) == 2
    assert titles[0].startswith("ES, horizon 5") and titles[1].startswith("ZN, horizon 5")
    assert all("first 30 test bars" in t for t in titles)
    for ax in fig.axes:
        realised = ax.get_lines()[-1]
        assert len(realised.get_xdata()) == 30
        assert np.all(np.diff(date2num(realised.get_xdata())) > 0)
