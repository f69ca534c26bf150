"""What the live_performance asset records outside its metadata: the decay alarm on the
champion's model version and the live-versus-backtest chart in its MLflow run."""

import json
from datetime import UTC, datetime

import numpy as np

from assets.common.metadata_images import image_md
from foxhunt_pipeline.forecasting.live_day import LiveDay
from resources.champion import DECAY_TAG, Champion
from resources.mlflow_tracking import MLflowResource
from resources.storage import FoxhuntStorage


def record_alarm(mlflow: MLflowResource, champ: Champion, ld: LiveDay, message: str) -> None:
    """The alarm on the model version (once): what the leaderboard's demotion reads."""
    if champ.ref.decay_alarm is not None:
        return
    body = {"trade_date": str(ld.day), "raised_at": datetime.now(UTC).isoformat(),
            "statistic": ld.result.peak if ld.result else None, "message": message}
    mlflow.client().set_model_version_tag(champ.ref.model, champ.ref.version, DECAY_TAG,
                                          json.dumps(body))


def live_chart(storage: FoxhuntStorage, mlflow: MLflowResource, champ: Champion,
          ld: LiveDay) -> dict:
    """The live-versus-backtest chart inline, and in the champion's MLflow run."""
    from models.monitoring.plots import live_vs_backtest  # lazy: matplotlib

    if ld.band is None:
        return {}
    path = storage.run_scratch / "live" / f"live_vs_backtest_{ld.day}.png"
    live_vs_backtest(path, ld.band, ld.equity, ld.sharpe,
                     f"{champ.ref.key} live since {champ.live_start} vs its walk-forward "
                     f"(net of costs, all roots)")
    client = mlflow.client()
    client.log_artifact(champ.ref.run_id, str(path), "live")
    last = {r["scope"]: r for r in ld.rows if r["trade_date"] == str(ld.day)}
    for scope, r in last.items():
        for k in ("sharpe", "ic", "pinball"):
            if np.isfinite(r[k]):
                client.log_metric(champ.ref.run_id, f"live_{k}_{scope}", float(r[k]))
    return {"live_vs_backtest": image_md(path, "live vs backtest")}
