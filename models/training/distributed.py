"""Data-parallel forecaster training with torch DistributedDataParallel (Dagster-free).

Run one process per device under ``torchrun`` (``assets.ddp_worker`` is the
target script). Semantics follow ``models.training.loop.train_forecaster`` so a DDP run is
the same optimisation as a single-process run with the same *global* batch:

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

import copy
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from models.quantile import pinball_loss
from models.registry import model_type_of
from models.training.checkpoint import dataset_signature, load_optimizer_state, read_checkpoint_meta
from models.training.loop import (
    BEST_NAME,
    LAST_NAME,
    TrainConfig,
    TrainingDivergedError,
    TrainResult,
    end_epoch,
    lr_at,
    result_from_state,
)
from models.windows import TrainingData, WindowDataset


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


def train_forecaster_ddp(
    model: nn.Module,
    data: TrainingData,
    config: TrainConfig,
    *,
    device: torch.device | str = "cpu",
    autocast_dtype: torch.dtype | None = None,
    checkpoint_dir: Path | None = None,
    resume: bool = False,
    on_epoch_end: Callable[[dict[str, float]], None] | None = None,
) -> TrainResult:
    """``train_forecaster`` across the initialised process group; ``config.batch_size`` is
    the global batch. Every rank returns the same ``TrainResult``; ``model`` ends holding
    the best weights seen (on every rank)."""
    if not dist.is_initialized():
        raise RuntimeError("train_forecaster_ddp needs an initialised process group "
                           "(call init_distributed under torchrun)")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(device)
    if config.batch_size < world:
        raise ValueError(f"global batch_size {config.batch_size} is smaller than the world "
                         f"size {world}: every rank needs at least one window per step")
    train_ds, val_ds = data.window_dataset("train"), data.window_dataset("validation")
    if len(train_ds) == 0:
        raise ValueError("training split has no windows")
    if len(val_ds) == 0:
        raise ValueError("validation split has no windows (needed for early stopping)")
    if config.num_threads:
        torch.set_num_threads(config.num_threads)

    model.to(device)
    model_type = model_type_of(model)
    quantiles = torch.tensor(model.config.quantiles, dtype=torch.float32, device=device)
    n_parameters = int(sum(p.numel() for p in model.parameters()))
    last_path = checkpoint_dir / LAST_NAME if checkpoint_dir else None
    best_path = checkpoint_dir / BEST_NAME if checkpoint_dir else None
    state = {"epoch": 0, "step": 0, "best_val": math.inf, "best_epoch": 0, "bad_epochs": 0,
             "history": []}
    optimizer_state_from: Path | None = None
    if resume and last_path is not None and last_path.is_file():  # every rank reads it
        meta = read_checkpoint_meta(last_path)
        if meta.get("model_type") != model_type or meta.get("config") != model.config.to_dict():
            raise ValueError(f"{last_path}: saved for {meta.get('model_type')} "
                             f"{meta.get('config')}, cannot resume a different model")
        _load_weights(model, last_path, device)
        state, optimizer_state_from = meta["loop_state"], last_path

    ddp = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=config.lr, betas=config.betas,
                                  eps=config.eps, weight_decay=config.weight_decay)
    if optimizer_state_from is not None:
        load_optimizer_state(optimizer_state_from, optimizer)
    best_state = copy.deepcopy(model.state_dict())
    if resume and best_path is not None and best_path.is_file():
        best_model = copy.deepcopy(model)
        _load_weights(best_model, best_path, device)
        best_state = best_model.state_dict()
    use_scaler = autocast_dtype == torch.float16 and device.type == "cuda"
    scaler = torch.amp.GradScaler("cuda") if use_scaler else None

    steps_per_epoch = math.ceil(len(train_ds) / config.batch_size)
    if config.max_batches_per_epoch:
        steps_per_epoch = min(steps_per_epoch, config.max_batches_per_epoch)
    total_steps = steps_per_epoch * config.epochs
    base_extra = {**dataset_signature(data), "train_config": config.to_dict(),
                  "world_size": world, **config.extra_metadata}
    started = time.perf_counter()
    stopped_early = False
    while state["epoch"] < config.epochs:
        epoch = state["epoch"] + 1
        torch.manual_seed(int(np.random.default_rng([config.seed, epoch, rank]).integers(2**62)))
        ddp.train()
        epoch_start = time.perf_counter()
        losses, norms, n_samples = [], [], 0
        order = np.random.default_rng([config.seed, epoch]).permutation(len(train_ds))
        for i in range(steps_per_epoch):
            global_idx = order[i * config.batch_size:(i + 1) * config.batch_size]
            local_idx = shard(global_idx, rank, world)
            step = state["step"] + 1
            lr = lr_at(state["step"], total_steps, config)
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch = _to_device(train_ds.batch(local_idx), device)
            with _autocast(device, autocast_dtype):
                pred = ddp(batch["static"], batch["observed"], batch["known"])
            local_loss = pinball_loss(pred.float(), batch["target"], quantiles)
            weight = world * len(local_idx) / len(global_idx)
            global_loss = _all_reduce_sum(local_loss.detach() * len(local_idx)) / len(global_idx)
            last_good = last_path if last_path is not None and last_path.is_file() else None
            if not torch.isfinite(global_loss):
                raise TrainingDivergedError(
                    f"loss is {global_loss.item()} at epoch {epoch}, step {step} (rank {rank} "
                    f"of {world}); last good checkpoint: {last_good}", epoch=epoch, step=step,
                    last_good_checkpoint=last_good)
            optimizer.zero_grad(set_to_none=True)
            if scaler is not None:
                scaler.scale(local_loss * weight).backward()
                scaler.unscale_(optimizer)
            else:
                (local_loss * weight).backward()  # DDP averages: sum_r w_r * mean_r / world
            max_norm = config.grad_clip if config.grad_clip else math.inf
            grad_norm = torch.nn.utils.clip_grad_norm_(ddp.parameters(), max_norm)
            if not torch.isfinite(grad_norm) and scaler is None:
                raise TrainingDivergedError(
                    f"gradient norm is {grad_norm.item()} at epoch {epoch}, step {step}; "
                    f"last good checkpoint: {last_good}", epoch=epoch, step=step,
                    last_good_checkpoint=last_good)
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            state["step"] = step
            losses.append(global_loss.item())
            norms.append(grad_norm.item())
            n_samples += len(global_idx)
        train_seconds = time.perf_counter() - epoch_start
        val_loss = evaluate_loss_ddp(model, val_ds, quantiles, config.eval_batch_size, device,
                                     autocast_dtype, config.max_val_batches)
        record, improved = end_epoch(
            state, epoch=epoch, losses=losses, norms=norms, n_samples=n_samples,
            epoch_start=epoch_start, train_seconds=train_seconds, val_loss=val_loss,
            optimizer=optimizer, config=config, model=model, model_type=model_type,
            base_extra=base_extra, best_path=best_path, last_path=last_path,
            write_checkpoints=checkpoint_dir is not None and rank == 0,
        )
        if improved:
            best_state = copy.deepcopy(model.state_dict())
        if on_epoch_end is not None and rank == 0:
            on_epoch_end(dict(record))
        if checkpoint_dir is not None:
            dist.barrier()  # a resume after this epoch finds rank 0's files complete
        if config.patience is not None and state["bad_epochs"] >= config.patience:
            stopped_early = state["epoch"] < config.epochs
            break
    model.load_state_dict(best_state)
    return result_from_state(state, best_path, last_path, started, n_parameters, stopped_early)


@torch.no_grad()
def evaluate_loss_ddp(model: nn.Module, dataset: WindowDataset, quantiles: torch.Tensor,
                      batch_size: int = 512, device: torch.device | str = "cpu",
                      autocast_dtype: torch.dtype | None = None,
                      max_batches: int | None = None) -> float:
    """Mean pinball loss over the same windows ``evaluate_loss`` scores, each rank scoring
    its shard; the sum and count are all-reduced, so every rank gets the same number."""
    device = torch.device(device)
    was_training = model.training
    model.eval()
    n = len(dataset) if max_batches is None else min(len(dataset), max_batches * batch_size)
    mine = shard(np.arange(n), dist.get_rank(), dist.get_world_size())
    total = torch.zeros(2, dtype=torch.float64, device=device)
    for start in range(0, len(mine), batch_size):
        idx = mine[start:start + batch_size]
        batch = _to_device(dataset.batch(idx), device)
        with _autocast(device, autocast_dtype):
            pred = model(batch["static"], batch["observed"], batch["known"])
        loss = pinball_loss(pred.float(), batch["target"], quantiles.to(device))
        total[0] += loss.double() * len(idx)
        total[1] += len(idx)
    model.train(was_training)
    dist.all_reduce(total)
    return float(total[0] / total[1].clamp_min(1))


# --- internals ---------------------------------------------------------------


def _all_reduce_sum(value: torch.Tensor) -> torch.Tensor:
    out = value.clone()
    dist.all_reduce(out)
    return out


def _to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    if device.type == "cpu":
        return batch
    return {k: v.pin_memory().to(device, non_blocking=True) for k, v in batch.items()}


def _autocast(device: torch.device, dtype: torch.dtype | None):
    import contextlib

    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def _load_weights(model: nn.Module, path: Path, device: torch.device) -> None:
    from safetensors.torch import load_file

    from models.training.checkpoint import OPTIMIZER_PREFIX, checkpoint_file

    state = {k: v for k, v in load_file(str(checkpoint_file(path))).items()
             if not k.startswith(OPTIMIZER_PREFIX)}
    model.load_state_dict(state, strict=True)
    model.to(device)
