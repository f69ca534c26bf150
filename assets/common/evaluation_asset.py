"""The evaluation asset of a family (the evaluation group's five and the ensemble's): the
same walk-forward protocol, baselines and outputs for every model."""

import dagster as dg

from assets.common import EAGER_AFTER_CHECKS, OWNERS, code_version_of
from assets.common.evaluation_config import EvaluationConfig
from assets.common.evaluation_run import evaluate_family
from models.agents import forecast_memo
from resources.mlflow_tracking import MLflowResource
from resources.storage import FoxhuntStorage
from resources.torch_device import TorchDevice


def evaluation_asset(family: str, upstream: str, after: tuple[str, ...] = ()):
    """``after``: evaluations whose fold models this one reuses (the ensemble's members)."""

    @dg.asset(
        name=f"{family}_evaluation",
        deps=[upstream, *after],
        group_name="evaluation",
        kinds={"pytorch", "duckdb", "mlflow"},
        owners=OWNERS,
        code_version=code_version_of("models.evaluation.evaluate", "models.evaluation.backtest",
                                     "models.evaluation.metrics", "models.evaluation.walk_forward",
                                     "models.evaluation.folds", "models.evaluation.row_pool",
                                     "models.evaluation.candidates", "models.evaluation.skill",
                                     "models.evaluation.family_candidates"),
        automation_condition=EAGER_AFTER_CHECKS,
        description=f"Walk-forward evaluation of {upstream}'s configuration: one fresh model per "
        "fold, scored with costs and next-bar fills on the same folds and bars as the flat / "
        "buy-and-hold / momentum / climatology baselines; per-fold and pooled metrics "
        "(Sharpe, IC, trades) with Bonferroni-adjusted block-bootstrap CIs, and the production "
        "model's plots and running cost.",
    )
    def _asset(context: dg.AssetExecutionContext, config: EvaluationConfig, storage: FoxhuntStorage,
               mlflow: MLflowResource, torch_device: TorchDevice) -> dg.MaterializeResult:
        with forecast_memo.on_disk(storage.forecast_cache):  # the agents' state, shared
            return evaluate_family(family, context, config, storage, mlflow, torch_device)

    return _asset
