"""Weight-only int8 storage: the TFT's and Mamba-2's int8 artifacts are >= 3.5x smaller
than fp32 on disk, load in a fresh process, and stay within the tolerance of fp32."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from models.export import WEIGHTS_FILE, export_artifact, load_artifact
from models.export.int8_weight_only import (
    MIN_GROUP,
    apply_weight_only_int8,
    dequantize_tensor,
    group_dims,
    quantize_tensor,
    stored_bytes,
    weight_only_tensors,
)
from models.mamba2.model import Mamba2Config, Mamba2Forecaster
from models.quantization import DEFAULT_TOLERANCE, quantize_variants
from models.quantization.report import quantize_forecaster
from models.tft.model import TemporalFusionTransformer, TFTConfig
from tests.model_data import synthetic_training_data

N_OBSERVED, N_KNOWN, N_STATIC = 247, 14, 7  # the real feature counts
TARGET_RATIO = 3.5


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_codes_round_to_nearest_with_one_scale_per_output_row():
    w = torch.randn(6, 100, generator=torch.Generator().manual_seed(0)) * torch.arange(1, 7).unsqueeze(1)
    q, scale = quantize_tensor(w)
    assert q.dtype == torch.int8 and scale.shape == (6, 1)
    assert int(q.abs().max()) == 127 and int(q.min()) >= -127
    assert torch.allclose(scale.squeeze(1), w.abs().amax(dim=1) / 127)
    err = (w - dequantize_tensor(q, scale)).abs() / scale
    assert float(err.max()) <= 0.5 + 1e-4


def test_groups_merge_small_trailing_dims_until_a_scale_covers_enough_elements():
    assert group_dims((64, 1044)) == 1  # per output channel
    assert group_dims((4, 64, 128)) == 2  # per row of each per-variable matrix
    assert group_dims((261, 8, 8)) == 1  # 64 elements per variable
    assert group_dims((261, 4, 1)) == 0  # one scale for the tensor
    q, scale = quantize_tensor(torch.zeros(3, MIN_GROUP))
    assert torch.equal(dequantize_tensor(q, scale), torch.zeros(3, MIN_GROUP))


def test_large_parameters_of_any_module_go_int8_small_ones_fp16_buffers_untouched():
    class Holder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Parameter(torch.randn(200, 64))  # plain Parameter, no Linear
            self.norm = torch.nn.LayerNorm(100)
            self.tiny = torch.nn.Parameter(torch.randn(3))
            self.register_buffer("levels", torch.tensor([0.1, 0.5, 0.9]))

    m = Holder()
    before = m.table.detach().clone()
    assert apply_weight_only_int8(m) == ["table"]
    stored = weight_only_tensors(m)
    assert stored["table"][0].dtype == torch.int8 and stored["norm.weight"][0].dtype == torch.float16
    assert "tiny" not in stored and torch.equal(m.levels, torch.tensor([0.1, 0.5, 0.9]))
    # the module now computes with exactly the stored values
    assert torch.equal(m.table, dequantize_tensor(*stored["table"]))
    assert 0 < float((m.table.detach() - before).abs().max()) <= float(stored["table"][1].max()) / 2 + 1e-6
    assert stored_bytes(m) < 0.4 * sum(p.numel() * 4 for p in m.parameters())


def _data():
    return synthetic_training_data({"train": 120, "validation": 60, "test": 200}, n_observed=N_OBSERVED,
                                   n_known=N_KNOWN, n_static=N_STATIC)


MODELS = {
    "tft": lambda: TemporalFusionTransformer(TFTConfig(n_static=N_STATIC, n_observed=N_OBSERVED,
                                                       n_known=N_KNOWN, hidden=128)),
    "mamba2": lambda: Mamba2Forecaster(Mamba2Config(n_static=N_STATIC, n_observed=N_OBSERVED,
                                                    n_known=N_KNOWN, hidden=128)),
}


def _files_on_disk(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.name != "meta.json")


@pytest.fixture(scope="module", params=sorted(MODELS))
def report(request, tmp_path_factory):
    torch.manual_seed(0)
    model = MODELS[request.param]().eval()
    out = tmp_path_factory.mktemp(request.param)
    # the same container for both (TorchScript), so the ratio is the weights' alone
    rep = quantize_forecaster(model, _data(), model_name=request.param, out_dir=out, max_windows=64,
                              precisions=("fp32", "int8"), latency_repeats=1,
                              export_formats=("torchscript",))
    return request.param, model, rep


def test_int8_artifact_is_at_least_3_5x_smaller_on_disk_and_within_tolerance(report):
    name, _, rep = report
    rows = {r["precision"]: r for r in rep.rows}
    assert set(rep.artifacts) == {"fp32", "int8"}, rows["int8"]["reason"]
    disk = {p: _files_on_disk(a) for p, a in rep.artifacts.items()}
    assert rows["int8"]["artifact_bytes"] == disk["int8"]
    assert rows["int8"]["size_ratio"] == pytest.approx(disk["fp32"] / disk["int8"])
    assert rows["int8"]["size_source"] == "artifact files on disk"
    assert disk["fp32"] / disk["int8"] >= TARGET_RATIO, (name, disk)
    assert rows["int8"]["accepted"]
    assert rows["int8"]["metric_rel_change"] <= DEFAULT_TOLERANCE.max_rel_loss_increase


def test_int8_artifact_holds_no_float_weights_in_its_model_file(report):
    _, _, rep = report
    path = rep.artifacts["int8"]
    assert (path / WEIGHTS_FILE).exists()
    raw = torch.jit.load(str(path / "model.ts"))  # without the weights file: placeholders only
    assert max(t.numel() for t in raw.state_dict().values() if t.is_floating_point()) == 0
    with zipfile.ZipFile(path / "model.ts") as z:
        assert not [n for n in z.namelist() if n.endswith(".debug_pkl")]


FRESH = """
import sys, torch
from safetensors.torch import load_file, save_file
from models.export import load_artifact
fn, meta = load_artifact(sys.argv[1])
x = load_file(sys.argv[2])
with torch.inference_mode():
    y = fn(x["static"], x["observed"], x["known"])
save_file({"y": y.contiguous()}, sys.argv[3])
print(meta["precision"], meta["weights_file"])
"""


def test_int8_artifact_round_trips_in_a_fresh_process(report, tmp_path):
    name, model, rep = report
    data = _data()
    batch = data.window_dataset("test").batch(list(range(5)))
    x = {k: batch[k].contiguous() for k in ("static", "observed", "known")}
    save_file(x, str(tmp_path / "x.safetensors"))
    done = subprocess.run([sys.executable, "-c", FRESH, str(rep.artifacts["int8"]), str(tmp_path / "x.safetensors"),
                           str(tmp_path / "y.safetensors")], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["int8", WEIGHTS_FILE]
    got = load_file(str(tmp_path / "y.safetensors"))["y"]
    fn, _ = load_artifact(rep.artifacts["int8"])
    with torch.inference_mode():
        assert torch.allclose(got, fn(*x.values()), atol=1e-6)
        ref = model(*x.values())
    assert float((got - ref).abs().max() / ref.abs().max()) <= 0.1, name  # OUTPUT_TOLERANCE int8


def test_missing_weights_file_is_named(tmp_path):
    torch.manual_seed(0)
    model = Mamba2Forecaster(Mamba2Config(n_static=5, n_observed=12, n_known=10, hidden=16, headdim=8,
                                          d_state=8)).eval()
    x = (torch.randn(4, 5), torch.randn(4, 60, 12), torch.randn(4, 65, 10))
    int8 = quantize_variants(model, x, precisions=("int8",))["int8"]
    path = export_artifact(int8.module, x, tmp_path / "m", metadata={"precision": "int8"})
    fn, meta = load_artifact(path)
    with torch.inference_mode():
        assert torch.allclose(fn(*x), int8.module(*x), atol=1e-5)
    (path / meta["weights_file"]).unlink()
    with pytest.raises(FileNotFoundError, match=WEIGHTS_FILE):
        load_artifact(path)
