"""Checkpoints: one safetensors file (weights, optional optimizer state, JSON metadata
in its header) plus a human-readable JSON sidecar with the same metadata.

Why one file: the weights and the description of what they are (model type, config,
feature names, feature hash) must never disagree, and a single ``os.replace`` is the
only atomic step the filesystem gives us. Every write goes to a uniquely named
temporary file in the destination directory, is fsynced, then renamed over the target;
any failure removes the temporary file. Loading uses safetensors and JSON only, so a
checkpoint can never execute code (no pickle).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from foxhunt_pipeline.basics.atomic import atomic_write
from models.registry import build_model
from models.windows import TrainingData

FORMAT_VERSION = 1
WEIGHTS_NAME = "model.safetensors"
META_KEY = "foxhunt"
OPTIMIZER_PREFIX = "__optimizer__."


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, unreadable or not one of ours."""


class CheckpointMismatchError(ValueError):
    """A checkpoint was trained on different features or shapes than the dataset at hand."""


def checkpoint_file(dir_or_path: str | os.PathLike[str]) -> Path:
    """A ``.safetensors`` path is used as is; anything else is a directory holding
    ``model.safetensors``."""
    path = Path(dir_or_path)
    return path if path.suffix == ".safetensors" else path / WEIGHTS_NAME


def sidecar_file(weights: Path) -> Path:
    return weights.with_suffix(".json")


def dataset_signature(data: TrainingData) -> dict[str, Any]:
    """What a checkpoint must record about its training data to be reused safely."""
    meta = data.meta
    return {
        "observed_names": data.observed_names,
        "known_names": data.known_names,
        "static_names": data.static_names,
        "lookback": data.lookback,
        "horizon": data.horizon,
        "quantiles": [float(q) for q in meta.get("quantiles", [])],
        "target_scale": data.target_scale,
        "feature_hash": meta.get("feature_hash"),
    }


def save_checkpoint(
    dir_or_path: str | os.PathLike[str],
    model: nn.Module,
    *,
    model_type: str,
    config: dict[str, Any],
    extra: dict[str, Any] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
) -> Path:
    """Write weights + metadata atomically; returns the ``.safetensors`` path.

    ``extra`` (JSON-safe) is merged into the metadata: put ``dataset_signature(data)``
    there so ``check_compatible`` can refuse the wrong dataset later. With
    ``optimizer`` its state is stored in the same file (see ``load_optimizer_state``).
    """
    target = checkpoint_file(dir_or_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    meta: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "model_type": model_type,
        "config": config,
        "n_parameters": int(sum(p.numel() for p in model.parameters())),
        "saved_at_unix": time.time(),
        "torch_version": torch.__version__,
        **(extra or {}),
    }
    if optimizer is not None:
        opt_tensors, opt_meta = _flatten_optimizer(optimizer)
        tensors.update(opt_tensors)
        meta["optimizer"] = opt_meta
    meta_json = json.dumps(meta, sort_keys=True)  # fails here, before any file, if not JSON-safe
    atomic_write(target, lambda tmp: save_file(tensors, str(tmp), metadata={META_KEY: meta_json}))
    sidecar_meta = {k: v for k, v in meta.items() if k != "optimizer"}
    atomic_write(sidecar_file(target),
                 lambda tmp: tmp.write_text(json.dumps(sidecar_meta, indent=2)))
    return target


def read_checkpoint_meta(dir_or_path: str | os.PathLike[str]) -> dict[str, Any]:
    """Metadata from the safetensors header (the sidecar is for people, not for loading)."""
    path = checkpoint_file(dir_or_path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            header = f.metadata() or {}
    except Exception as exc:  # safetensors raises its own error types
        raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from exc
    if META_KEY not in header:
        raise CheckpointError(f"{path}: safetensors file without '{META_KEY}' metadata")
    meta = json.loads(header[META_KEY])
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: format_version {meta.get('format_version')!r}, "
                              f"expected {FORMAT_VERSION}")
    return meta


def load_checkpoint(
    dir_or_path: str | os.PathLike[str], device: torch.device | str = "cpu"
) -> tuple[nn.Module, dict[str, Any]]:
    """Rebuild the model named in the metadata and load its weights (strictly), in eval
    mode on ``device``. Returns ``(model, meta)``."""
    path = checkpoint_file(dir_or_path)
    meta = read_checkpoint_meta(path)
    model = build_model(meta["model_type"], meta["config"])
    with safe_open(str(path), framework="pt", device="cpu") as f:
        names = f.keys()  # safe_open is not iterable
        state = {k: f.get_tensor(k) for k in names if not k.startswith(OPTIMIZER_PREFIX)}
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise CheckpointError(f"{path}: weights do not fit {meta['model_type']} "
                              f"with config {meta['config']}: {exc}") from exc
    return model.to(device).eval(), meta


def load_optimizer_state(
    dir_or_path: str | os.PathLike[str], optimizer: torch.optim.Optimizer
) -> None:
    """Restore an optimizer saved with ``save_checkpoint(..., optimizer=...)``."""
    path = checkpoint_file(dir_or_path)
    meta = read_checkpoint_meta(path)
    if "optimizer" not in meta:
        raise CheckpointError(f"{path}: checkpoint holds no optimizer state")
    opt_meta = meta["optimizer"]
    with safe_open(str(path), framework="pt", device="cpu") as f:
        names = f.keys()
        tensors = {k[len(OPTIMIZER_PREFIX):]: f.get_tensor(k)
                   for k in names if k.startswith(OPTIMIZER_PREFIX)}
    state: dict[int, dict[str, Any]] = {}
    for key, value in opt_meta["scalars"].items():
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = value
    for key, tensor in tensors.items():
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = tensor
    optimizer.load_state_dict({"state": state, "param_groups": opt_meta["param_groups"]})


def check_compatible(meta: dict[str, Any], data: TrainingData) -> None:
    """Raise ``CheckpointMismatchError`` naming the first field where the checkpoint's
    training data and ``data`` disagree (feature names, order, shapes, feature hash)."""
    current = dataset_signature(data)
    for key in ("observed_names", "known_names", "static_names"):
        if key not in meta:
            raise CheckpointMismatchError(f"checkpoint metadata has no '{key}'")
        saved, now = list(meta[key]), current[key]
        if saved != now:
            missing = [n for n in saved if n not in now]
            added = [n for n in now if n not in saved]
            detail = (f"missing from dataset {missing[:5]}, new in dataset {added[:5]}"
                      if missing or added else "same names in a different order")
            raise CheckpointMismatchError(
                f"{key} differ: checkpoint has {len(saved)}, dataset has {len(now)} ({detail})")
    for key in ("lookback", "horizon"):
        if key in meta and int(meta[key]) != current[key]:
            raise CheckpointMismatchError(
                f"{key} differs: checkpoint {meta[key]}, dataset {current[key]}")
    saved_hash, now_hash = meta.get("feature_hash"), current["feature_hash"]
    if saved_hash is not None and now_hash is not None and saved_hash != now_hash:
        raise CheckpointMismatchError(
            f"feature_hash differs: checkpoint {saved_hash!r}, dataset {now_hash!r}")


# --- internals ---------------------------------------------------------------


def _flatten_optimizer(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """Split ``optimizer.state_dict()`` into tensors (safetensors) and JSON-safe scalars."""
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, Any] = {}
    for idx, entry in sd["state"].items():
        for name, value in entry.items():
            key = f"{idx}.{name}"
            if isinstance(value, torch.Tensor):
                tensors[OPTIMIZER_PREFIX + key] = value.detach().to("cpu").contiguous()
            else:
                scalars[key] = value
    groups = json.loads(json.dumps(sd["param_groups"]))  # tuples -> lists; raises if not JSON-safe
    return tensors, {"scalars": scalars, "param_groups": groups}
