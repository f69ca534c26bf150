"""The forecasting assets' names (assets and checks) and Configs: the champion's trading
rule and drift checks, the decay detector and the live band."""

import dagster as dg
from pydantic import Field

from assets.common.config_fields import library_default
from assets.common.evaluation_config import EvaluationConfig
from models.monitoring import decay, drift

FORECASTS = "champion_forecasts"


LIVE = "live_performance"


FEATURE_DRIFT = "forecasts_feature_drift"


PREDICTION_DRIFT = "forecasts_prediction_drift"


DECAY = "live_pnl_decay"


class ChampionForecastsConfig(dg.Config):
    """The trading rule of the forecasts and the drift checks' reference and thresholds."""

    threshold_k: float = Field(EvaluationConfig().threshold_k, description="Enter beyond this "
                               "many one-way costs (the evaluation's no-trade band).")
    reference_days: int = Field(20, description="Stored dates before the live start that the "
                                "drift checks compare each date with: a date warns when a "
                                "feature moved further than on any of them (leave one date "
                                "out), at most 1 / (days + 1) of the time by chance.")
    reference_rows: int = Field(20_000, description="Feature rows sampled from them.")
    psi_floor: float = Field(library_default(drift.DriftThresholds, "psi"),
                             description="A drifted feature's PSI must also pass this.")

    def thresholds(self) -> drift.DriftThresholds:
        return drift.DriftThresholds(psi=self.psi_floor)


class LivePerformanceConfig(dg.Config):
    """The decay detector's thresholds (``models.monitoring.decay``) and the band's bootstrap."""

    decay_false_alarm: float = Field(library_default(decay.DecayThresholds, "false_alarm"),
                                     description="Chance that live_pnl_decay fails over "
                                     "decay_horizon_days when nothing decayed: sets the CUSUM "
                                     "level from the champion's own test bars.")
    decay_horizon_days: int = Field(library_default(decay.DecayThresholds, "horizon_days"),
                                    description="Live trade dates that false-alarm rate is "
                                    "counted over.")
    decay_k_fraction: float = Field(library_default(decay.DecayThresholds, "k_fraction"),
                                    description="The CUSUM's allowance as a share of the "
                                    "backtest's edge per bar.")
    decay_min_bars: int = Field(library_default(decay.DecayThresholds, "min_bars"),
                                description="Live bars before the check may fail.")
    decay_threshold: float = Field(0.0, description="A fixed CUSUM level (bar P&L sd units) "
                                   "instead of the calibrated one; 0: calibrated.")
    resamples: int = Field(400, description="Block-bootstrap paths of the band, the "
                           "calibration and the false-alarm rate.")
    seed: int = 0

    def thresholds(self) -> decay.DecayThresholds:
        return decay.DecayThresholds(self.decay_k_fraction, self.decay_false_alarm,
                                     self.decay_horizon_days, self.decay_min_bars,
                                     self.decay_threshold or None)
