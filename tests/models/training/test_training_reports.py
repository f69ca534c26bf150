"""What the training assets show and record, without Dagster: progress lines, the DDP
result and an agent's validation curve."""

from __future__ import annotations

from models.agents.training_report import curve_markdown
from models.training.ddp_result import DDPResult
from models.training.progress import progress_note


def test_progress_says_how_long_is_left_in_hours_past_an_hour():
    assert progress_note(1, 4, 3600.0) == ", 25% done, ~3h00m left"
    assert progress_note(5, 4, 10.0) == ", 100% done, ~0s left"


def test_the_ddp_result_reads_like_a_train_result():
    r = DDPResult({"best_val_loss": "0.5", "epochs_run": 3, "n_parameters": 10,
                   "training_seconds": 1, "checkpoint": "ckpt"})
    assert (r.history, r.best_val_loss, r.epochs_run, r.checkpoint) == ([], 0.5, 3, "ckpt")


def test_an_agents_validation_curve_is_one_row_per_backtest():
    table = curve_markdown([{"timesteps": 100, "mean_reward": 0.25, "sharpe_per_bar": 0.1,
                             "trades": 4, "mean_abs_position": 0.5}, {"timesteps": 200}])
    lines = table.splitlines()
    assert len(lines) == 4 and lines[2] == "| 100 | 0.25 | 0.100 | 4 | 0.50 |"
    assert lines[3] == "| 200 | nan | nan | 0 | nan |"
