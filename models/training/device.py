"""Pick the torch device and the matching mixed-precision setting."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DeviceChoice:
    device: torch.device
    autocast_dtype: torch.dtype | None  # bf16 where the GPU supports it, else fp16; None on CPU
    pin_memory: bool
    name: str


def select_device(prefer: str = "auto") -> DeviceChoice:
    """``"auto"``: CUDA when present, else CPU. ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` force
    a choice; asking for CUDA on a machine without it is an error, not a silent fallback."""
    prefer = prefer.strip().lower()
    if prefer == "auto":
        prefer = "cuda" if torch.cuda.is_available() else "cpu"
    if prefer == "cpu":
        return DeviceChoice(torch.device("cpu"), None, False, "cpu")
    if not prefer.startswith("cuda"):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {prefer!r}")
    if not torch.cuda.is_available():
        raise RuntimeError(f"device {prefer!r} requested but CUDA is not available "
                           f"(torch {torch.__version__})")
    device = torch.device(prefer)
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        raise RuntimeError(f"device {prefer!r} requested but only {torch.cuda.device_count()} "
                           "CUDA device(s) exist")
    device = torch.device("cuda", index)
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return DeviceChoice(device, dtype, True, torch.cuda.get_device_name(index))
