"""Five tiny models (TFT, Mamba-2, LightGBM, DQN- and PPO-shaped policies) on a features table
in the real format, each as the artifact the training assets register."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import torch

from assets.common.registration import SERVING_FORMATS
from foxhunt_pipeline.features.dataset import DatasetConfig, build_training_dataset
from foxhunt_pipeline.serving.actions import SERVING_META_FILE, serving_meta
from models.agents.policy import PolicyNet, save_policy_net
from models.agents.state import ForecastState
from models.agents.trading_env import prepare_market_data
from models.export import export_artifact, forecaster_metadata
from models.lightgbm import LightGBMConfig, fit, save_lightgbm
from models.registry import build_model
from tests.serving.test_predict import _features

LOOKBACK, HORIZON = 12, 3
FORECASTER_PARAMS = {
    "tft": {"hidden": 8, "heads": 2, "lstm_layers": 1, "dropout": 0.0, "var_width": 2},
    "mamba2": {"hidden": 8, "n_layers": 1, "d_state": 8, "chunk_size": 8, "dropout": 0.0},
}


def features_and_data():
    features = _features()
    data = build_training_dataset(features, DatasetConfig(lookback=LOOKBACK, horizon=HORIZON,
                                                          fractions=(0.6, 0.2, 0.2)))
    return features, data


def forecaster(family: str, data) -> torch.nn.Module:
    torch.manual_seed(1)
    config = {"n_static": len(data.static_names), "n_observed": len(data.observed_names),
              "n_known": len(data.known_names), "lookback": data.lookback, "horizon": data.horizon,
              "quantiles": list(data.meta["quantiles"]), **FORECASTER_PARAMS[family]}
    return build_model(family, config).eval()


def forecaster_artifact(family: str, data, out: Path) -> Path:
    model = forecaster(family, data)
    b = data.window_dataset("validation").batch(np.arange(2))
    return export_artifact(model, (b["static"], b["observed"], b["known"]), out,
                           metadata=forecaster_metadata(data.meta, model=family, precision="fp32"),
                           formats=SERVING_FORMATS)


def agent_dir(algo: str, data, out: Path, observation: str = "forecasts") -> Path:
    """A DQN- / PPO-shaped policy as the agent assets save it: observing the forecasts of a
    tiny TFT and Mamba-2 (saved beside it), or with ``observation="window"`` the raw window."""
    torch.manual_seed(2 if algo == "dqn" else 3)
    state = None
    if observation == "forecasts":
        state = ForecastState.for_data({f: forecaster(f, data) for f in ("tft", "mamba2")}, data,
                                       features=data.observed_names[:2])
        lookback, channels = 1, state.layout.width
        env = {"lookback": 1, "include_known": False, "obs_clip": 10.0, "session_gap_factor": 1.5}
        extra = {"observation": "forecasts", "state_layout": state.layout.to_dict()}
    else:
        lookback, channels = LOOKBACK, len(data.observed_names) + len(data.known_names)
        env = {"lookback": LOOKBACK, "include_known": True, "obs_clip": 10.0,
               "session_gap_factor": 1.5}
        extra = {"observation": "window"}
    net = PolicyNet({"lookback": lookback, "n_channels": channels, "kind": "mlp", "hidden": 8}, [8],
                    "relu", algo=algo,
                    meta={"env": env, "feature_hash": data.meta["feature_hash"], **extra})
    net.state = state
    with torch.no_grad():
        if state is None:  # a bias towards changing position, so all three actions occur
            net.head[-1].weight.mul_(20.0)
        else:  # long well above the feature's mean, short well below, flat near it
            _follow_forecast(net, state, data)
    save_policy_net(net, out)
    (out / SERVING_META_FILE).write_text(json.dumps(serving_meta(data.meta)))
    return out


def _follow_forecast(net: PolicyNet, state: ForecastState, data) -> None:
    """Weights of a policy that follows the state's first feature (centred on its train mean;
    an untrained forecaster's quantiles vary too little for int8 to keep its decisions): an
    agent-like stand-in whose three actions all occur."""
    col = state.names().index(f"feature:{state.layout.feature_names[0]}")
    market = prepare_market_data(data, "train", state=state)
    x = market.features[market.rows, col]
    centre, scale = float(np.mean(x)), float(np.std(x)) + 1e-6
    first, head = net.encoder.body[0], net.head
    first.weight.zero_()
    first.bias.zero_()
    first.weight[0, col], first.bias[0] = 1 / scale, -centre / scale
    first.weight[1, col], first.bias[1] = -1 / scale, centre / scale
    for layer in head:
        if isinstance(layer, torch.nn.Linear):
            layer.weight.zero_()
            layer.bias.zero_()
    hidden, out = head[0], head[-1]
    hidden.weight[0, 0], hidden.weight[1, 1] = 1.0, 1.0
    out.weight[2, 0], out.weight[0, 1], out.bias[1] = 1.0, 1.0, 0.5


def lightgbm_artifact(data, out: Path) -> Path:
    """A few boosters on the tiny dataset, saved as ``lightgbm_model`` saves them."""
    config = LightGBMConfig(fit_quantiles=(0.1, 0.5, 0.9), num_boost_round=8,
                            params={"min_data_in_leaf": 5})
    return save_lightgbm(fit(data, config), out, metadata=forecaster_metadata(
        data.meta, model="lightgbm", precision="fp32", lightgbm_config=config.to_dict()))


def all_artifacts(data, root: Path) -> dict[str, Path]:
    return {
        "tft": forecaster_artifact("tft", data, root / "tft"),
        "mamba2": forecaster_artifact("mamba2", data, root / "mamba2"),
        "lightgbm": lightgbm_artifact(data, root / "lightgbm"),
        "dqn": agent_dir("dqn", data, root / "dqn"),
        "ppo": agent_dir("ppo", data, root / "ppo"),
    }


def one_root(features: pl.DataFrame, root: str = "ES") -> pl.DataFrame:
    return features.filter(pl.col("root") == root)
