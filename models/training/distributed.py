"""Data-parallel forecaster training with torch DistributedDataParallel (Dagster-free).

Run one process per device under ``torchrun`` (``assets.ddp_worker`` is the
target script). It is ``models.training.loop.train_forecaster`` with a ``DdpWorld``: the
same loop (schedule, precision, resume, divergence checks), so a DDP run is the same
optimisation as a single-process run with the same *global* batch:

* the batch order is the harness's (``numpy`` generator seeded by ``(seed, epoch)``) and
  each global batch is split across ranks (``batch[rank::world]``), so over an epoch
  every rank sees a disjoint ``1/world`` of the windows, as ``DistributedSampler`` gives;
* each rank's mean loss is weighted by ``world * n_rank / n_global`` before DDP averages
  the gradients, so the update is the gradient of the global batch mean even when the
  last batch does not divide evenly;
* learning rate (``lr_at``), clipping, early stopping and divergence checks use values
  that are identical on every rank (all-reduced), so every rank takes the same branch
  and none is left waiting in a collective;
* only rank 0 calls ``on_epoch_end`` and writes checkpoints (atomic, via
  ``models.training.checkpoint.save_checkpoint``).

Dropout masks differ per rank (seeded by ``(seed, epoch, rank)``), so runs with dropout
match a single process in distribution, not bit for bit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from models.training.loop import TrainConfig, TrainResult, World, train_forecaster
from models.windows import TrainingData


@dataclass(frozen=True)
class DistEnv:
    """This process's place in the job, as ``torchrun`` describes it in the environment."""

    rank: int
    world_size: int
    local_rank: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls) -> DistEnv:
        try:
            return cls(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
                       int(os.environ.get("LOCAL_RANK", os.environ["RANK"])))
        except KeyError as exc:
            raise RuntimeError(f"environment variable {exc.args[0]} is not set: start this "
                               "process with torchrun (or set RANK, WORLD_SIZE, "
                               "MASTER_ADDR, MASTER_PORT)") from None


def backend_for(device: torch.device | str) -> str:
    """nccl for CUDA devices, gloo for CPU."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def device_for(env: DistEnv, want: str = "auto") -> torch.device:
    """``auto``: this rank's local GPU when CUDA is present, else CPU."""
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(want)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {want!r} asked for, but CUDA is not available")
        index = env.local_rank if device.index is None else device.index
        if index >= torch.cuda.device_count():
            raise RuntimeError(f"rank {env.rank} wants cuda:{index}, but this node has "
                               f"{torch.cuda.device_count()} GPU(s): lower nproc_per_node")
        device = torch.device("cuda", index)
        torch.cuda.set_device(device)
    return device


def init_distributed(device: torch.device, timeout_s: float = 600.0) -> DistEnv:
    """Join the process group torchrun set up (env:// rendezvous); idempotent."""
    env = DistEnv.from_env()
    if not dist.is_initialized():
        kwargs = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(backend_for(device), timeout=timedelta(seconds=timeout_s),
                                **kwargs)
    return env


def shard(indices: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    """Rank ``rank``'s strided share of ``indices`` (sizes differ by at most one)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside a world of {world_size}")
    return indices[rank::world_size]


class DdpWorld(World):
    """The training loop as one rank of the initialised process group."""

    def __init__(self) -> None:
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def seed(self, seed: int, epoch: int | None) -> None:
        """Dropout masks differ per rank: seeded by ``(seed, epoch, rank)`` each epoch."""
        if epoch is not None:
            torch.manual_seed(int(np.random.default_rng([seed, epoch, self.rank]).integers(2**62)))

    def wrap(self, model: nn.Module, device: torch.device) -> nn.Module:
        return DistributedDataParallel(model,
                                       device_ids=[device] if device.type == "cuda" else None)

    def shard(self, indices: np.ndarray) -> np.ndarray:
        return shard(indices, self.rank, self.size)

    def batch_loss(self, local_loss: torch.Tensor, n_local: int, n_global: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """DDP averages gradients, so ``sum_r w_r * mean_r / world`` with ``w_r = world *
        n_r / n`` is the gradient of the global batch mean."""
        weight = self.size * n_local / n_global
        global_loss = local_loss.detach() * n_local
        dist.all_reduce(global_loss)
        return local_loss * weight, global_loss / n_global

    def sum_over_ranks(self, total: float, count: int) -> tuple[float, float]:
        device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        sums = torch.tensor([total, count], dtype=torch.float64, device=device)
        dist.all_reduce(sums)
        return float(sums[0]), float(sums[1])

    def barrier(self) -> None:
        dist.barrier()

    def metadata(self) -> dict[str, Any]:
        return {"world_size": self.size}

    def where(self) -> str:
        return f" (rank {self.rank} of {self.size})"


def train_forecaster_ddp(model: nn.Module, data: TrainingData, config: TrainConfig,
                         **options: Any) -> TrainResult:
    """``train_forecaster(model, data, config, **options)`` (device, autocast_dtype,
    checkpoint_dir, resume, on_epoch_end) across the initialised process group;
    ``config.batch_size`` is the global batch. Every rank returns the same ``TrainResult``; ``model`` ends holding
    the best weights seen (on every rank)."""
    if not dist.is_initialized():
        raise RuntimeError("train_forecaster_ddp needs an initialised process group "
                           "(call init_distributed under torchrun)")
    world = DdpWorld()
    if config.batch_size < world.size:
        raise ValueError(f"global batch_size {config.batch_size} is smaller than the world "
                         f"size {world.size}: every rank needs at least one window per step")
    return train_forecaster(model, data, config, world=world, **options)
