"""Out-of-sample evaluation: metrics, backtest with costs, baselines, running cost, the
leaderboard rules and plots; ``evaluate`` puts them together per model."""
