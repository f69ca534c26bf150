"""One settings object, read when an entry point starts; size profiles as run-config
defaults; every hyperparameter's default defined once, in the library's dataclass."""

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from assets.common.agent_configs import DQNTrainingConfig, PPOTrainingConfig
from assets.common.evaluation_config import EvaluationConfig
from assets.common.quantized_asset import QuantizationConfig
from assets.common.training_configs import Mamba2TrainingConfig, TFTTrainingConfig
from foxhunt_pipeline.config import settings as settings_module
from foxhunt_pipeline.config.profiles import ProfileError, check_profiles
from foxhunt_pipeline.config.settings import Settings, current_settings, load_settings
from models.agents.train import DQNConfig, PPOConfig
from models.tft.model import TFTConfig
from models.training.loop import TrainConfig


@pytest.fixture
def restore_settings():
    before = settings_module._current
    yield
    settings_module._current = before


def test_a_profile_chosen_after_the_assets_were_imported_still_counts(restore_settings):
    # the Config classes above were built under the tests' FOXHUNT_PROFILE=fast
    load_settings(profile="default")
    assert TFTTrainingConfig().epochs == 30 and TFTTrainingConfig().hidden == 64
    assert EvaluationConfig().bootstrap == 1000
    load_settings(profile="fast")
    fast = TFTTrainingConfig()
    assert (fast.epochs, fast.hidden, fast.max_batches_per_epoch) == (2, 16, 15)
    assert DQNTrainingConfig().total_timesteps == 2_000
    assert TFTTrainingConfig(epochs=5).epochs == 5  # run config still wins


def test_a_run_takes_the_profile_of_the_settings_as_its_config_defaults(restore_settings):
    seen = {}

    @dg.asset
    def sized(config: Mamba2TrainingConfig) -> None:
        seen.update(config.model_dump())

    load_settings(profile="demo")
    assert dg.materialize([sized]).success
    assert (seen["epochs"], seen["max_batches_per_epoch"], seen["hidden"]) == (6, 60, 32)


def test_the_demo_tft_is_one_member_of_one_lstm_layer_and_width_2(restore_settings):
    load_settings(profile="demo")
    tft = TFTTrainingConfig()
    assert (tft.members, tft.lstm_layers, tft.var_width, tft.hidden) == (1, 1, 2, 32)


def test_the_asset_defaults_are_the_library_defaults_and_the_results_are_unchanged(
        restore_settings):
    load_settings(profile="default")
    tft, train = TFTTrainingConfig(), TrainConfig()
    assert (tft.epochs, tft.weight_decay, tft.learning_rate) == (train.epochs,
                                                                 train.weight_decay, train.lr)
    assert (tft.hidden, tft.heads, tft.dropout) == (TFTConfig.hidden, TFTConfig.heads,
                                                     TFTConfig.dropout)
    assert tft.members == TFTConfig.members == 1  # full size trains one TFT
    # the values the assets trained with before the defaults were merged
    assert (train.epochs, train.weight_decay) == (30, 1e-4)
    dqn, ppo = DQNTrainingConfig(), PPOTrainingConfig()
    assert dqn.learning_rate == DQNConfig().learning_rate == 5e-4
    # PPO's learning rate from 1e-3 to 3e-4 (issue 23: steadier after cloning the rule)
    assert (ppo.learning_rate, ppo.gamma, ppo.n_envs, ppo.ent_coef) == (3e-4, 0.5, 2, 0.0)
    assert (PPOConfig().learning_rate, PPOConfig().n_envs) == (3e-4, 2)


def test_every_config_field_says_what_it_is():
    for cls in (TFTTrainingConfig, Mamba2TrainingConfig, DQNTrainingConfig,
                PPOTrainingConfig):
        undocumented = [n for n, f in cls.model_fields.items() if not f.description]
        assert not undocumented, (cls.__name__, undocumented)


def test_settings_are_read_from_the_environment_given_and_bad_profiles_are_named(
        restore_settings):
    assert Settings.from_env({"FOXHUNT_PROFILE": "demo"}).profile == "demo"
    assert Settings.from_env({}).profile == "default"
    with pytest.raises(ValueError, match="FOXHUNT_PROFILE='huge'"):
        Settings.from_env({"FOXHUNT_PROFILE": "huge"})
    assert load_settings({"FOXHUNT_PROFILE": "fast"}) is current_settings()


def test_every_key_of_every_profile_is_read_by_a_config():
    import foxhunt_pipeline.definitions  # noqa: F401  (every asset module declares its fields)
    check_profiles()  # the profiles as shipped


@pytest.mark.parametrize("section, key, said", [
    ("tft_model", "lerning_rate", "tft_model.lerning_rate is read by no config (did you mean "
                                  "tft_model.learning_rate?)"),
    ("dqn_agent", "timesteps", "dqn_agent.timesteps is read by no config"),
    ("tft_modle", "epochs", "section 'tft_modle' is read by no config (did you mean 'tft_model'?)"),
])
def test_a_misspelt_profile_key_is_named_instead_of_falling_back_to_the_full_size(
        section, key, said):
    profiles = {"demo": {section: {key: 1}}}
    with pytest.raises(ProfileError) as err:
        check_profiles(profiles)
    assert f"demo: {said}" in str(err.value)


def test_the_code_location_does_not_start_with_a_misspelt_profile_key(tmp_path):
    code = ("from foxhunt_pipeline.config import profiles\n"
            "profiles.PROFILES['demo']['walk_forward']['test_dyas'] = 3\n"
            "import foxhunt_pipeline.definitions\n")
    env = {**os.environ, "FOXHUNT_HOME": str(tmp_path), "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=Path(__file__).resolve().parents[2], timeout=300)
    assert run.returncode != 0
    assert "demo: walk_forward.test_dyas is read by no config (did you mean " \
           "walk_forward.test_days?)" in run.stderr


def test_cpu_profiles_make_no_half_precision_variants(restore_settings):
    # fp16 / bf16 ran 1.3-3.6x slower than fp32 on the demo's CPU: never recommended there
    for profile in ("demo", "fast"):
        load_settings(profile=profile)
        assert QuantizationConfig().precisions == ["fp32", "int8"]
    load_settings(profile="default")
    assert QuantizationConfig().precisions == ["fp32", "int8", "fp16", "bf16"]
