"""Regression: the TFT's row-chunk loop once baked the example batch into exported artifacts
(wrong outputs from batch ~9 at 261 variables); an artifact must hold at any batch size."""

from __future__ import annotations

import torch

from models.export import export_artifact, load_artifact
from models.tft.model import TemporalFusionTransformer, TFTConfig


def test_exported_tft_matches_the_module_at_batch_sizes_beyond_the_example(tmp_path):
    torch.manual_seed(0)
    model = TemporalFusionTransformer(TFTConfig(n_static=7, n_observed=261, n_known=14, hidden=16)).eval()
    example = (torch.randn(4, 7), torch.randn(4, 60, 261), torch.randn(4, 65, 14))
    path = export_artifact(model, example, tmp_path / "tft", metadata={"model": "tft", "precision": "fp32"})
    fn, _ = load_artifact(path)
    for b in (1, 33, 200):
        inputs = (torch.randn(b, 7), torch.randn(b, 60, 261), torch.randn(b, 65, 14))
        with torch.no_grad():
            assert torch.allclose(fn(*inputs), model(*inputs), atol=1e-5), b
