"""The config fields a dataset fixes, in one place for every builder."""

from __future__ import annotations

import pytest

from models.registry import SCALE_INPUT, build_model, dataset_model_config

META = {"static_names": ["s_root_id"], "observed_names": ["f_ret_lag1", SCALE_INPUT, "f_vol"],
        "known_names": ["k_rth", "k_holiday"], "lookback": 30, "horizon": 5,
        "quantiles": [0.1, 0.5, 0.9]}


def test_tft_gets_the_return_as_its_scale_input():
    config = dataset_model_config("tft", META)
    assert config == {"n_static": 1, "n_observed": 3, "n_known": 2, "lookback": 30, "horizon": 5,
                      "quantiles": [0.1, 0.5, 0.9], "output_scale_input": 1}
    assert build_model("tft", {**config, "hidden": 8, "heads": 2}).config.output_scale_input == 1


def test_a_family_without_the_field_or_a_dataset_without_the_return_gets_none():
    assert "output_scale_input" not in dataset_model_config("mamba2", META)
    build_model("mamba2", {**dataset_model_config("mamba2", META), "hidden": 8})
    no_return = {**META, "observed_names": ["f_ret_lag1", "f_vol"]}
    assert "output_scale_input" not in dataset_model_config("tft", no_return)


def test_unknown_family_is_named():
    with pytest.raises(KeyError, match="lstm"):
        dataset_model_config("lstm", META)
