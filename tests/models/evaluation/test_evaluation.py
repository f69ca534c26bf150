"""One model's evaluation: report contents, bad input, and the lookahead guard."""

from pathlib import Path

import numpy as np
import pytest
import torch

from models.evaluation.evaluate import EvaluationError, evaluate_agent, evaluate_forecaster
from tests.model_data import synthetic_training_data

Z9 = torch.tensor([-1.2816, -0.8416, -0.5244, -0.2533, 0.0, 0.2533, 0.5244, 0.8416, 1.2816])
FAST = {"latency_calls": 5, "bootstrap": 300, "seed": 0, "make_plots": False}


class LinearOnSignal(torch.nn.Module):
    """Median = a * observed[:, -1, 0] (the synthetic signal column), Gaussian spread."""

    def __init__(self, a: float, horizon: int = 5):
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor(float(a)))
        self.register_buffer("z", Z9.clone())
        self.horizon = horizon

    def forward(self, static, observed, known):
        m = self.a * observed[:, -1, 0]
        return m[:, None, None] + self.z[None, None, :] * torch.ones(1, self.horizon, 1)


@pytest.fixture(scope="module")
def noise():
    return synthetic_training_data(signal=0.0, seed=11)


@pytest.fixture(scope="module")
def learnable():
    return synthetic_training_data(signal=0.5, seed=12)


def _signal_positions(data):
    test = data.splits["test"]
    return np.sign(test.observed[test.window_starts + data.lookback - 1, 0]).astype(float)


# --- the lookahead guard ----------------------------------------------------------------


def test_guard_pure_noise_shows_no_skill(noise, tmp_path):
    rep = evaluate_forecaster("lin", LinearOnSignal(1.0), noise, out_dir=tmp_path, **FAST)
    agent = evaluate_agent("agent", _signal_positions(noise), noise, out_dir=tmp_path, **FAST)
    rows = {"lin": rep.metrics, "agent": agent.metrics, **rep.baselines}
    for name, m in rows.items():
        assert not m["sharpe_ci_low"] > 0.0, f"{name}: Sharpe significantly > 0 on noise"  # NaN: flat
        lo, hi = m["directional_accuracy_ci_low"], m["directional_accuracy_ci_high"]
        if np.isfinite(lo):
            assert lo <= 0.5 <= hi, f"{name}: directional accuracy CI [{lo}, {hi}] excludes 50%"
    assert rep.metrics["exposure"] > 0.5  # it did trade: the guard is not vacuous


def test_guard_detects_a_real_signal(learnable, tmp_path):
    rep = evaluate_forecaster("lin", LinearOnSignal(0.5), learnable, out_dir=tmp_path, **FAST)
    m = rep.metrics
    assert m["directional_accuracy_ci_low"] > 0.5
    assert m["sharpe_ci_low"] > 0.0
    assert m["q_risk_p50"] < rep.baselines["baseline:climatology"]["q_risk_p50"]


def test_guard_catches_positions_that_see_their_own_return(noise, tmp_path):
    test = noise.splits["test"]
    rows = test.window_starts + noise.lookback - 1
    leaked = np.sign(test.targets[rows, 0]).astype(float)
    rep = evaluate_agent("leaky", leaked, noise, out_dir=tmp_path, **FAST)
    assert rep.metrics["sharpe_ci_low"] > 0 and rep.metrics["directional_accuracy_ci_low"] > 0.5


# --- report contents --------------------------------------------------------------------


def test_forecaster_report_is_complete(learnable, tmp_path):
    model = LinearOnSignal(0.5)
    rep = evaluate_forecaster("tft", model, learnable, out_dir=tmp_path,
                              **{**FAST, "make_plots": True})
    assert rep.kind == "forecaster"
    assert all(isinstance(v, float) for v in rep.metrics.values())
    for key in ("q_risk_p50", "q_risk_p90", "coverage_80", "median_mae", "pinball_h1_q0.10",
                "sharpe", "sortino", "max_drawdown", "win_rate_trades", "turnover", "exposure",
                "latency_ms_p50", "latency_ms_p95", "latency_ms_p99", "throughput_b32_per_s",
                "throughput_b256_per_s", "peak_memory_mb", "n_parameters", "checkpoint_mb"):
        assert key in rep.metrics, key
    assert rep.metrics["n_parameters"] == 1.0
    assert set(rep.baselines) == {"baseline:flat", "baseline:buy_and_hold", "baseline:momentum_1",
                                  "baseline:climatology"}
    assert rep.baselines["baseline:flat"]["total_log_return"] == 0.0
    n_segments = len(np.unique(learnable.splits["test"].segment))
    assert rep.baselines["baseline:buy_and_hold"]["n_trades"] == n_segments
    assert rep.metrics["n_bars"] == learnable.splits["test"].n_windows
    for name in ("tft", *rep.baselines):
        assert f"| {name} |" in rep.markdown
    assert rep.period["test_start"].startswith("2024-") and rep.period["test_start"] in rep.markdown
    assert set(rep.plots) == {"fan_chart", "equity", "calibration"}
    for p in rep.plots.values():
        assert Path(p).parent == tmp_path and Path(p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [r["quantile"] for r in rep.calibration] == learnable.meta["quantiles"]
    assert rep.equity["tft"][-1] == pytest.approx(rep.metrics["total_log_return"])


def test_costs_are_applied_with_the_multiplier(learnable, tmp_path):
    kw = {**FAST, "latency_calls": 0, "threshold_k": 0.0}
    free = evaluate_forecaster("m", LinearOnSignal(0.5), learnable, out_dir=tmp_path,
                               cost_multiplier=0.0, **kw).metrics
    paid = evaluate_forecaster("m", LinearOnSignal(0.5), learnable, out_dir=tmp_path,
                               cost_multiplier=3.0, **kw).metrics
    assert free["total_cost"] == 0.0 and paid["total_cost"] > 0
    assert free["total_log_return"] - paid["total_log_return"] == pytest.approx(paid["total_cost"])
    assert "latency_ms_p50" not in free


def test_agent_matches_forecaster_with_the_same_positions(learnable, tmp_path):
    kw = {**FAST, "latency_calls": 0}
    fc = evaluate_forecaster("f", LinearOnSignal(0.5), learnable, out_dir=tmp_path,
                             threshold_k=0.0, **kw).metrics
    pos = _signal_positions(learnable)
    by_window = evaluate_agent("a", pos, learnable, out_dir=tmp_path, **kw)
    test = learnable.splits["test"]
    per_row = np.zeros(test.n_rows)
    per_row[test.window_starts + learnable.lookback - 1] = pos
    by_row = evaluate_agent("a", per_row, learnable, out_dir=tmp_path, **kw).metrics
    policy = evaluate_agent("a", lambda s, o, k: torch.sign(o[:, -1, 0]), learnable,
                            out_dir=tmp_path, **{**kw, "latency_calls": 5})
    for m in (by_window.metrics, by_row, policy.metrics):
        assert m["total_log_return"] == pytest.approx(fc["total_log_return"])
        assert m["n_trades"] == fc["n_trades"]
    assert "latency_ms_p95" in policy.metrics and by_window.kind == "agent"
    assert by_window.plots == {}
    plotted = evaluate_agent("a", pos, learnable, out_dir=tmp_path, **{**kw, "make_plots": True})
    assert set(plotted.plots) == {"equity"} and plotted.plots["equity"].stat().st_size > 1000


# --- bad input --------------------------------------------------------------------------


def test_empty_test_split_names_its_dates(tmp_path):
    data = synthetic_training_data(n_rows={"train": 600, "test": 50})
    with pytest.raises(EvaluationError, match=r"tft: the test split is empty.*2024-"):
        evaluate_forecaster("tft", LinearOnSignal(0.5), data, out_dir=tmp_path, **FAST)
    data = synthetic_training_data(n_rows={"train": 600})
    with pytest.raises(EvaluationError, match="no test split"):
        evaluate_agent("dqn", np.zeros(1), data, out_dir=tmp_path, **FAST)


class NaNOnSecondBatch(LinearOnSignal):
    calls = 0

    def forward(self, static, observed, known):
        self.calls += 1
        out = super().forward(static, observed, known)
        return out * float("nan") if self.calls == 2 else out


def test_nan_predictions_name_model_and_batch(learnable, tmp_path):
    with pytest.raises(EvaluationError, match=r"mamba2: non-finite predictions in batch 1"):
        evaluate_forecaster("mamba2", NaNOnSecondBatch(0.5), learnable, out_dir=tmp_path,
                            batch_size=128, **FAST)


def test_wrong_output_shape_and_feature_mismatch(learnable, tmp_path):
    with pytest.raises(EvaluationError, match=r"batch 0 output has shape \(256, 3, 9\)"):
        evaluate_forecaster("tft", LinearOnSignal(0.5, horizon=3), learnable,
                            out_dir=tmp_path, **FAST)
    names = learnable.observed_names[:-1] + ["f_vwap"]
    with pytest.raises(EvaluationError, match=r"missing \['f_vwap'\].*unexpected \['f_11'\]"):
        evaluate_forecaster("tft", LinearOnSignal(0.5), learnable, out_dir=tmp_path,
                            model_features={"observed": names}, **FAST)


def test_bad_agent_positions_are_named(learnable, tmp_path):
    pos = _signal_positions(learnable)
    pos[300] = 2.0
    with pytest.raises(EvaluationError, match="test window 300 .batch 1."):
        evaluate_agent("ppo", pos, learnable, out_dir=tmp_path, **FAST)
    with pytest.raises(EvaluationError, match="one per test window"):
        evaluate_agent("ppo", pos[:-1], learnable, out_dir=tmp_path, **FAST)


def test_missing_meta_field_is_named(learnable, tmp_path):
    import copy

    data = copy.copy(learnable)
    data.meta = {k: v for k, v in learnable.meta.items() if k != "bars_per_year"}
    with pytest.raises(EvaluationError, match="lacks 'bars_per_year'"):
        evaluate_agent("dqn", _signal_positions(learnable), data, out_dir=tmp_path, **FAST)
