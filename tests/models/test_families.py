"""The family registry: every entry resolves what it names, the lists derive from it, and
no code outside it dispatches on a family's name."""

import re
import subprocess
from pathlib import Path

import pytest

from models import families
from models.tuning.spaces import SPACES

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", families.ALL)
def test_every_entry_resolves_its_classes_and_functions(name):
    fam = families.family(name)
    assert fam.registered_name == f"foxhunt-{name}"
    assert isinstance(fam.config_class(), type)
    assert callable(fam.resolve("candidate"))
    if fam.kind == "agent":
        assert callable(fam.train_function()) and fam.members
    else:
        assert callable(fam.resolve("loader"))


def test_lists_derive_from_the_registry():
    assert families.ALL == ("tft", "mamba2", "lightgbm", "dqn", "ppo", "ensemble")
    assert set(families.FORECASTERS) | set(families.AGENTS) == set(families.ALL)
    assert set(SPACES) == set(families.names(tunable=True))
    assert "lightgbm" not in families.names(quantizable=True)
    assert families.by_registered_name("foxhunt-lightgbm").name == "lightgbm"
    with pytest.raises(KeyError, match="unknown model family 'xgb'"):
        families.family("xgb")


def test_no_dispatch_on_a_family_name_outside_the_registry():
    out = subprocess.run(["grep", "-rnE", r"family (==|!=|in \()", "foxhunt_pipeline", "models",
                          "assets", "resources", "--include=*.py"], cwd=ROOT,
                         capture_output=True, text=True).stdout
    assert out == "", out


def test_one_definition_of_the_family_lists_and_of_the_dataset_config():
    sources = {p: p.read_text() for d in ("foxhunt_pipeline", "models", "assets", "resources")
               for p in (ROOT / d).rglob("*.py")}
    lists = [p for p, s in sources.items()
             if re.search(r"^(FAMILIES|FORECASTERS|AGENTS)\s*=\s*\(", s, re.M)]
    assert lists == [], lists
    dataset_configs = [p for p, s in sources.items() if re.search(r"^class DatasetConfig\b", s, re.M)]
    assert [p.relative_to(ROOT).as_posix() for p in dataset_configs] == \
        ["foxhunt_pipeline/features/dataset.py"]
