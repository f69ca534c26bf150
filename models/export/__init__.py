"""Deployable artifacts: a model file plus a JSON sidecar, loadable with torch alone.

What works on torch 2.13 (CPU build), checked by ``tests/models/quantization/test_export.py``:

- fp32 / fp16 / bf16 modules (LSTM, Linear, LayerNorm, attention, Conv1d):
  ``torch.export.export`` with a dynamic batch dimension + ``torch.export.save``
  (``model.pt2``) round-trips exactly.
- int8 dynamic-quantized modules: ``torch.export`` fails (the packed-params script
  objects have no ``__obj_flatten__``), so the fallback is TorchScript
  (``torch.jit.trace``, then ``torch.jit.script``) saved as ``model.ts``.

Every candidate is checked before it is kept: it must reproduce the module's outputs on
batch 1, 7 and 64, which is what "dynamic batch" means in practice (a trace that baked
the example batch size or a batch-dependent branch in fails here, not in production).
Trace from a small example batch (<= 4).

int8 variants also carry weight-only int8 tensors (``models.export.int8_weight_only``): in the
TorchScript file those parameters are empty placeholders; their int8 codes and fp32
scales go to ``weights_int8.safetensors`` (no pickle) and ``load_artifact`` puts the
dequantized tensors back, so the loaded module is the variant exactly. TorchScript's
``code/*.debug_pkl`` records (source ranges for error messages, 5-25% of a small model's
file) are dropped.

Layout of an artifact directory (written atomically, as ``TrainingData.save`` does)::

    meta.json    format, precision, input names / shapes, names, scales, feature hash ...
    model.pt2    (format "torch.export") or model.ts (format "torchscript")
    weights_int8.safetensors   (int8 variants) weight-only int8 codes + scales
"""

from __future__ import annotations

import copy
import inspect
import json
import os
import warnings
import zipfile
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from foxhunt_pipeline.basics.atomic import atomic_replace_dir, atomic_write
from models.export.int8_weight_only import dequantize_tensor, weight_only_tensors
from models.lightgbm.artifact import LIGHTGBM_FORMAT, load_lightgbm

META_FILE = "meta.json"
FORMAT_FILES = {"torch.export": "model.pt2", "torchscript": "model.ts"}
WEIGHTS_FILE = "weights_int8.safetensors"
FORECASTER_INPUTS = ("static", "observed", "known")
# batch 1, an odd size, and one big enough that batch-dependent Python branches (row
# chunking in the TFT, segment scans in Mamba-2) take their other path than in a trace
CHECK_BATCHES = (1, 7, 64)
CHECK_ATOL = 1e-5
HALF_CHECK_RTOL = {"fp16": 1e-2, "bf16": 5e-2}  # as quantization.OUTPUT_TOLERANCE
MAX_BATCH = 1 << 20
# Found on torch 2.13 (tests/models/quantization/test_export.py re-checks it): exporting a dynamic-quantized
# module fails after tracing the whole graph, which costs seconds, so it is skipped
# unless asked for alone.
TORCH_EXPORT_INT8_LIMIT = (
    "torch.export cannot serialise dynamic-quantized packed params "
    "(LinearPackedParamsBase has no __obj_flatten__)"
)


class ExportError(RuntimeError):
    """No export route reproduced the module; carries each route's failure."""


def export_artifact(
    module: nn.Module,
    example_inputs: Sequence[torch.Tensor],
    path: str | os.PathLike[str],
    *,
    metadata: Mapping[str, Any],
    input_names: Sequence[str] | None = None,
    formats: Sequence[str] = ("torch.export", "torchscript"),
    extra_files: Callable[[Path], Any] | None = None,
) -> Path:
    """Write ``path/`` (a directory) holding the first format that reproduces ``module``.

    ``metadata`` is copied into the sidecar (JSON-serialisable values: model name,
    precision, observed/known/static names, target_scale, quantiles, lookback, horizon,
    feature_hash, normalisation ...); format, input names / shapes and versions are added.
    ``extra_files(directory)`` writes what else the artifact needs beside the module (an
    agent's forecasters), inside the same atomic swap.
    """
    module = module.eval()
    # own storage: a slice of a big batch would otherwise be saved whole as the sample input
    example = tuple(x.detach().clone() for x in example_inputs)
    names = list(input_names) if input_names else _default_input_names(len(example))
    if len(names) != len(example):
        raise ValueError(f"{len(names)} input names for {len(example)} example inputs")
    path = Path(path)

    def build(tmp: Path) -> None:
        fmt, failures = _write_first_working(module, example, tmp, formats)
        if extra_files is not None:
            extra_files(tmp)
        meta = {
            **dict(metadata),
            "format": fmt,
            "model_file": FORMAT_FILES[fmt],
            "input_names": names,
            "input_shapes": {n: ["batch", *map(int, x.shape[1:])] for n, x in zip(names, example, strict=True)},
            "input_dtypes": {n: str(x.dtype).removeprefix("torch.") for n, x in zip(names, example, strict=True)},
            "export_fallback_reasons": failures,
            **_weights_meta(tmp),
            "torch_version": torch.__version__,
            "created_at": datetime.now(UTC).isoformat(),
        }
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2, default=_json_default))

    return atomic_replace_dir(path, build)


# training meta keys a forecaster artifact carries, so predict needs nothing else
FORECASTER_META_KEYS = (
    "lookback", "horizon", "quantiles", "target_scale", "observed_names", "known_names",
    "static_names", "target_names", "roots", "feature_hash", "normalization", "dataset_config",
    "bar_seconds",
)


def forecaster_metadata(training_meta: Mapping[str, Any], *, model: str, precision: str, **extra: Any) -> dict[str, Any]:
    """Sidecar metadata for a forecaster from ``TrainingData.meta`` (train-only normalisation
    included), plus model name, precision and anything in ``extra``."""
    missing = [k for k in ("lookback", "horizon", "quantiles", "target_scale", "observed_names",
                           "known_names", "static_names") if k not in training_meta]
    if missing:
        raise KeyError(f"training meta lacks {missing}")
    meta = {k: training_meta[k] for k in FORECASTER_META_KEYS if k in training_meta}
    return {"model": model, "precision": precision, **meta, **extra}


def load_artifact(path: str | os.PathLike[str]) -> tuple[Callable[..., Any], dict[str, Any]]:
    """``(callable, meta)``; the callable takes the inputs named in ``meta["input_names"]``."""
    path = Path(path)
    if path.is_file():
        path = path.parent
    meta_path = path / META_FILE
    if not meta_path.exists():
        raise FileNotFoundError(f"{path}: not an artifact directory (no {META_FILE})")
    meta = json.loads(meta_path.read_text())
    fmt = meta.get("format")
    if fmt == LIGHTGBM_FORMAT:  # not a torch module: its own loader
        return load_lightgbm(path)
    if fmt not in FORMAT_FILES:
        raise ValueError(f"{meta_path}: unknown artifact format {fmt!r}")
    model_path = path / meta.get("model_file", FORMAT_FILES[fmt])
    weights = meta.get("weights_file")
    return _load_model(fmt, model_path, path / weights if weights else None), meta


def artifact_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes on disk of the model file plus its weights file (the sidecar excluded)."""
    path = Path(path)
    if path.is_file():
        path = path.parent
    meta = json.loads((path / META_FILE).read_text())
    files = [meta["model_file"], *([meta["weights_file"]] if meta.get("weights_file") else [])]
    return sum((path / f).stat().st_size for f in files)


# --- export routes -------------------------------------------------------------------


def batch_of(example_inputs: Sequence[torch.Tensor], batch: int) -> tuple[torch.Tensor, ...]:
    """``example_inputs`` tiled / cut along dim 0 to ``batch`` rows: the batches an artifact
    is checked on here, and the ones quantization measures latency with."""
    out = []
    for x in example_inputs:
        reps = -(-batch // x.shape[0])
        out.append(x.repeat(reps, *([1] * (x.dim() - 1)))[:batch].clone())
    return tuple(out)


def _write_first_working(
    module: nn.Module, example: tuple[torch.Tensor, ...], out_dir: Path, formats: Sequence[str]
) -> tuple[str, dict[str, str]]:
    failures: dict[str, str] = {}
    for fmt in formats:
        if fmt not in FORMAT_FILES:
            raise ValueError(f"unknown export format {fmt!r}; expected one of {tuple(FORMAT_FILES)}")
        if fmt == "torch.export" and len(formats) > 1 and _has_dynamic_quantized(module):
            failures[fmt] = f"skipped: {TORCH_EXPORT_INT8_LIMIT}"
            continue
        if fmt == "torch.export" and weight_only_tensors(module):
            failures[fmt] = "skipped: weight-only int8 storage is written for TorchScript only"
            continue
        target = out_dir / FORMAT_FILES[fmt]
        weights = out_dir / WEIGHTS_FILE
        try:
            _WRITERS[fmt](module, example, target)
            _check_reproduces(module, _load_model(fmt, target, weights if weights.exists() else None), example)
            return fmt, failures
        except Exception as exc:
            failures[fmt] = f"{type(exc).__name__}: {_first_line(exc)}"
            target.unlink(missing_ok=True)
            weights.unlink(missing_ok=True)
    raise ExportError("no export route reproduced the module: " + "; ".join(f"{k}: {v}" for k, v in failures.items()))


def _write_torch_export(module: nn.Module, example: tuple[torch.Tensor, ...], target: Path) -> None:
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    dynamic: tuple[Any, ...] = tuple({0: batch} for _ in example)
    params = inspect.signature(module.forward).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        dynamic = (dynamic,)  # forward(*inputs): one spec for the whole *args tuple
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        program = torch.export.export(module, example, dynamic_shapes=dynamic)
    torch.export.save(program, str(target))


def _write_torchscript(module: nn.Module, example: tuple[torch.Tensor, ...], target: Path) -> None:
    errors = []
    module = _without_raising_properties(module)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        for make in (lambda: torch.jit.trace(module, example, check_trace=False), lambda: torch.jit.script(module)):
            try:
                scripted = make().eval()
                _check_reproduces(module, scripted, example)
                _store_weight_only(module, scripted, target.with_name(WEIGHTS_FILE))
                torch.jit.save(scripted, str(target))
                _drop_debug_records(target)
                return
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {_first_line(exc)}")
    raise RuntimeError(" / ".join(errors))


def _without_raising_properties(module: nn.Module) -> nn.Module:
    """TorchScript probes every attribute with ``hasattr``, which only swallows
    AttributeError; a property such as ``device = next(self.parameters()).device`` raises
    StopIteration on an int8 module (its weights are packed, not parameters). Such
    properties are shadowed by ``None`` on a copy; the traced graph never used them."""
    out = None
    for name, sub in module.named_modules():
        cls = type(sub)
        broken = {}
        for attr in dir(cls):
            if isinstance(inspect.getattr_static(cls, attr, None), property):
                try:
                    getattr(sub, attr)
                except Exception:
                    broken[attr] = property(lambda self: None)
        if broken:
            if out is None:
                out = copy.deepcopy(module)
            target = out.get_submodule(name)
            target.__class__ = type(cls.__name__, (cls,), {**broken, "__module__": cls.__module__})
    return module if out is None else out


def _store_weight_only(module: nn.Module, scripted: torch.jit.ScriptModule, target: Path) -> None:
    """Move the weight-only int8 tensors out of ``scripted`` (empty placeholders left) into
    a safetensors file of codes and scales; tensors the script does not hold as attributes
    (folded into a traced constant, say) stay where they are."""
    stored = weight_only_tensors(module)
    attrs = {**dict(scripted.named_parameters()), **dict(scripted.named_buffers())}
    out: dict[str, torch.Tensor] = {}
    placeholder = torch.empty(0)  # one shared storage: one zip record for all of them
    for name, (q, scale) in stored.items():
        if name not in attrs or attrs[name].dtype != torch.float32:
            continue
        _set_script_tensor(scripted, name, placeholder)
        if q.dtype == torch.int8:
            out[f"{name}.q"], out[f"{name}.scale"] = q.contiguous(), scale.contiguous()
        else:
            out[f"{name}.fp16"] = q.contiguous()
    if out:  # the other float tensors too: one safetensors entry costs less than a zip record
        for name, t in attrs.items():
            if name not in stored and t.dtype == torch.float32 and t.numel():
                out[f"{name}.fp32"] = t.detach().clone().contiguous()
                _set_script_tensor(scripted, name, placeholder)
    if out:
        save_file(out, str(target), metadata={"scheme": "symmetric int8, fp32 scale per group"})


def _load_weight_only(scripted: torch.jit.ScriptModule, weights: Path) -> None:
    if not weights.exists():
        raise FileNotFoundError(f"{weights}: artifact weights file missing")
    tensors = load_file(str(weights))
    for key, value in tensors.items():
        name, kind = key.rsplit(".", 1)
        if kind in ("fp16", "fp32"):
            _set_script_tensor(scripted, name, value.float())
        elif kind == "q":
            if f"{name}.scale" not in tensors:
                raise ValueError(f"{weights}: {key} has no {name}.scale")
            _set_script_tensor(scripted, name, dequantize_tensor(value, tensors[f"{name}.scale"]))
        elif kind != "scale":
            raise ValueError(f"{weights}: unexpected tensor {key!r}")


def _set_script_tensor(scripted: torch.jit.ScriptModule, name: str, value: torch.Tensor) -> None:
    *parents, attr = name.split(".")
    owner = scripted
    for part in parents:
        owner = getattr(owner, part)
    owner._c.setattr(attr, value)


def _drop_debug_records(target: Path) -> None:
    """Rewrite the TorchScript zip without its ``.debug_pkl`` source-range records and
    alignment padding, pickles and code deflated (tensor records stay stored: int8 codes
    hardly compress). ``torch.jit.load`` reads both; the export check loads the result."""
    def rewrite(tmp: Path) -> None:
        with zipfile.ZipFile(target) as zin, zipfile.ZipFile(tmp, "w") as zout:
            for info in zin.infolist():
                if info.filename.endswith(".debug_pkl"):
                    continue
                data = zin.read(info.filename)
                out = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                tensor_record = "/data/" in info.filename or "/constants/" in info.filename
                out.compress_type = zipfile.ZIP_STORED if tensor_record else zipfile.ZIP_DEFLATED
                zout.writestr(out, data)

    atomic_write(target, rewrite)


def _weights_meta(out_dir: Path) -> dict[str, Any]:
    if not (out_dir / WEIGHTS_FILE).exists():
        return {}
    return {"weights_file": WEIGHTS_FILE, "weights_scheme": "weight-only int8, fp32 scale per group; "
            "dequantized at load"}


def _has_dynamic_quantized(module: nn.Module) -> bool:
    return any(type(m).__module__.startswith("torch.ao.nn.quantized.dynamic") for m in module.modules())


_WRITERS = {"torch.export": _write_torch_export, "torchscript": _write_torchscript}


def _load_model(fmt: str, model_path: Path, weights: Path | None = None) -> Callable[..., Any]:
    if not model_path.exists():
        raise FileNotFoundError(f"{model_path}: artifact model file missing")
    if fmt == "torch.export":
        return torch.export.load(str(model_path)).module()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # int8 has no torch.export route yet
        scripted = torch.jit.load(str(model_path), map_location="cpu").eval()
    if weights is not None:
        _load_weight_only(scripted, weights)
    return scripted


def _check_reproduces(module: nn.Module, loaded: Callable[..., Any], example: tuple[torch.Tensor, ...]) -> None:
    for b in CHECK_BATCHES:
        inputs = tuple(_vary(x, seed) for seed, x in enumerate(batch_of(example, b)))
        # the reference takes the module path the artifact recorded: an inference-only fast
        # path (the TFT's) runs only without autograd, and under dynamic int8 its fused ops
        # quantize activations at other points, which is int8 rounding, not a wrong artifact
        with torch.enable_grad():
            want = _as_tensor(module(*inputs)).detach()
        with torch.inference_mode():
            got = _as_tensor(loaded(*inputs))
        if want.shape != got.shape:
            raise AssertionError(f"batch {b}: output shape {tuple(got.shape)} != {tuple(want.shape)}")
        err = float((want.float() - got.float()).abs().max())
        if err > _check_tolerance(module) * max(1.0, float(want.float().abs().max())):
            raise AssertionError(f"batch {b}: max abs diff {err:.3g} from the module")


def _check_tolerance(module: nn.Module) -> float:
    """Relative tolerance of artifact vs module: tight in fp32; in half precision a
    batch-dependent path (e.g. Mamba-2's segmented scan at batch 64) that the artifact took
    differently from eager differs by rounding alone, at about the format's epsilon."""
    dtypes = {t.dtype for t in (*module.parameters(), *module.buffers()) if t.is_floating_point()}
    if torch.bfloat16 in dtypes:
        return HALF_CHECK_RTOL["bf16"]
    if torch.float16 in dtypes:
        return HALF_CHECK_RTOL["fp16"]
    return CHECK_ATOL


def _vary(x: torch.Tensor, seed: int) -> torch.Tensor:
    """Different rows per batch position, so a trace that mixed rows would show."""
    if not x.is_floating_point():
        return x
    g = torch.Generator().manual_seed(1000 + seed)
    return x + 0.1 * torch.randn(x.shape, generator=g, dtype=x.dtype).to(x.device)


def _as_tensor(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    if isinstance(out, dict) and out:
        return _as_tensor(next(iter(out.values())))
    raise TypeError(f"cannot compare model output of type {type(out).__name__}")


def _default_input_names(n: int) -> list[str]:
    if n == len(FORECASTER_INPUTS):
        return list(FORECASTER_INPUTS)
    return ["obs"] if n == 1 else [f"input_{i}" for i in range(n)]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


def _json_default(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"metadata value not JSON serialisable: {type(o).__name__}")


__all__ = ["ExportError", "artifact_bytes", "export_artifact", "forecaster_metadata", "load_artifact"]
