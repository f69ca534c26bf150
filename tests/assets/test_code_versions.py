"""An asset's code version covers every project module in its call tree, so moving code
into a helper module (or editing one) still marks the asset stale in the UI."""

from __future__ import annotations

import assets.common as common
from assets.common import code_version_of, project_closure


def test_the_closure_follows_project_imports_transitively_and_only_those():
    closure = project_closure("foxhunt_pipeline.ingest.decode")
    assert {"foxhunt_pipeline.ingest.batches", "foxhunt_pipeline.ingest.records",
            "foxhunt_pipeline.ingest.background_writer", "foxhunt_pipeline.contracts.validation",
            "foxhunt_pipeline.contracts.checks"} <= set(closure)
    assert all(m.split(".")[0] in ("foxhunt_pipeline", "models") for m in closure)
    assert "models.quantization.variants" in project_closure("models.quantization")


def test_a_package_leads_to_the_modules_it_re_exports():
    closure = project_closure("foxhunt_pipeline.features")
    assert "foxhunt_pipeline.features.library" in closure, closure


def test_editing_a_helper_module_changes_the_asset_code_version(monkeypatch):
    before = code_version_of("foxhunt_pipeline.ingest.decode")
    real = common._source
    monkeypatch.setattr(common, "_source", lambda name: real(name) + (
        "\n# edited" if name == "foxhunt_pipeline.ingest.spill" else ""))
    assert code_version_of("foxhunt_pipeline.ingest.decode") != before
    assert code_version_of("models.tft.model") == code_version_of("models.tft.model")  # stable otherwise
