"""Evaluation assets: every model and baseline under one walk-forward protocol (the same
folds, bars and costs; ``models.evaluation.walk_forward``); one row per fold plus a pooled
row per candidate in DuckDB ``model_evaluations``, pooled metrics in the model's MLflow run
and the asset's metadata. The production model's own test split gives the plots and the
running cost."""

from assets.common.evaluation_asset import evaluation_asset

tft_evaluation = evaluation_asset("tft", "tft_model")
mamba2_evaluation = evaluation_asset("mamba2", "mamba2_model")
lightgbm_evaluation = evaluation_asset("lightgbm", "lightgbm_model")
# the agents' walk-forward retrains the forecasters they observe per fold: after those
# forecasters' own evaluations, it finds their fold models in the cache
dqn_evaluation = evaluation_asset("dqn", "dqn_agent", after=("tft_evaluation", "mamba2_evaluation"))
ppo_evaluation = evaluation_asset("ppo", "ppo_agent", after=("tft_evaluation", "mamba2_evaluation"))
