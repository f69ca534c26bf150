"""Torch device resource: CUDA with autocast when present, CPU otherwise."""

from __future__ import annotations

import dagster as dg
import torch

from models.training.device import select_device


class TorchDevice(dg.ConfigurableResource):
    """``prefer``: auto | cpu | cuda. ``threads`` caps CPU threads (0 = torch default)."""

    prefer: str = "auto"
    threads: int = 0

    def choose(self):
        if self.threads > 0:
            torch.set_num_threads(self.threads)
        return select_device(self.prefer)
