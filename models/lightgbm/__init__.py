"""The LightGBM quantile forecaster family (``foxhunt-lightgbm``): fit, config, artifact."""

from models.lightgbm.artifact import LightGBMForecaster, load_lightgbm, save_lightgbm
from models.lightgbm.model import LightGBMConfig, LightGBMQuantiles, fit, fit_lightgbm_quantiles

__all__ = ["LightGBMConfig", "LightGBMForecaster", "LightGBMQuantiles", "fit",
           "fit_lightgbm_quantiles", "load_lightgbm", "save_lightgbm"]
