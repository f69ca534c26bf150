"""One training loop for every forecaster with the shared interface
(``model.config.quantiles``; ``model(static, observed, known) -> [B, H, Q]``).

AdamW with a warmup + cosine (or one-cycle, or constant) learning rate computed from
the global step, so resuming needs no scheduler pickle; gradient clipping; early
stopping on the validation quantile loss; gradient L2 norm logged every epoch. A NaN
or infinite loss or gradient norm raises ``TrainingDivergedError`` before the
optimizer step, so the last checkpoint on disk is the last good one. Deterministic
on CPU for a given seed: batch order comes from ``numpy`` generators seeded by
``(seed, epoch)``, dropout from torch's generator, which is checkpointed too.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn
from tqdm.auto import tqdm

from foxhunt_pipeline.basics.config_fields import check_known_fields
from models import climatology
from models.quantile import pinball_loss
from models.registry import model_type_of
from models.training.checkpoint import (
    OPTIMIZER_PREFIX,
    checkpoint_file,
    dataset_signature,
    load_optimizer_state,
    read_checkpoint_meta,
    save_checkpoint,
)
from models.windows import TrainingData, WindowDataset, to_device

LAST_NAME = "last.safetensors"
BEST_NAME = "best.safetensors"
SCHEDULES = ("cosine", "onecycle", "constant")


class TrainingDivergedError(RuntimeError):
    """Loss or gradient norm became NaN/inf; ``last_good_checkpoint`` is left intact."""

    def __init__(self, message: str, *, epoch: int, step: int,
                 last_good_checkpoint: Path | None):
        super().__init__(message)
        self.epoch = epoch
        self.step = step
        self.last_good_checkpoint = last_good_checkpoint


@dataclass
class TrainConfig:
    """The optimisation of one forecaster; these defaults are the training assets' too."""

    epochs: int = 30
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 1e-4
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    schedule: str = "cosine"  # warmup then cosine decay | "onecycle" | "constant"
    warmup_fraction: float = 0.05
    min_lr_fraction: float = 0.05
    grad_clip: float | None = 1.0
    patience: int | None = 5  # epochs without val improvement before stopping; None = never
    min_delta: float = 0.0
    seed: int = 0
    max_batches_per_epoch: int | None = None
    max_val_batches: int | None = None
    #: validation windows scored per epoch: a fixed sample (seed ``VAL_SAMPLE_SEED``, the same
    #: every epoch, so early stopping compares like with like) when the split has more;
    #: the full split is scored once, at the end (``TrainResult.full_val_loss``). None: all
    val_windows: int | None = None
    eval_batch_size: int = 512
    num_threads: int | None = None
    extra_metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.betas = (float(self.betas[0]), float(self.betas[1]))
        if self.schedule not in SCHEDULES:
            raise ValueError(f"TrainConfig.schedule must be one of {SCHEDULES}, "
                             f"got {self.schedule!r}")
        for name in ("epochs", "batch_size", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0:
            raise ValueError(f"TrainConfig.lr must be > 0, got {self.lr}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["betas"] = list(self.betas)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        check_known_fields(cls, d)
        return cls(**d)


#: the name a run config, size profile or study gives a ``TrainConfig`` field, where they
#: differ (``learning_rate``: the name users know; ``lr``: the optimizer's)
CONFIG_NAMES = {"learning_rate": "lr"}


def train_fields(named: dict[str, Any]) -> dict[str, Any]:
    """``named`` with each config name (``CONFIG_NAMES``) turned into its ``TrainConfig`` field."""
    return {CONFIG_NAMES.get(k, k): v for k, v in named.items()}


@dataclass
class TrainResult:
    best_val_loss: float
    best_epoch: int
    epochs_run: int
    history: list[dict[str, float]]
    best_checkpoint: Path | None
    last_checkpoint: Path | None
    training_seconds: float
    n_parameters: int
    stopped_early: bool
    #: the final model's loss on the whole validation split, when epochs scored a sample
    full_val_loss: float | None = None


VAL_SAMPLE_SEED = 0


def validation_sample(dataset: WindowDataset, n: int | None) -> WindowDataset:
    """``dataset`` itself, or a fixed sample of ``n`` of its windows in time order."""
    if n is None or len(dataset) <= n:
        return dataset
    pick = np.sort(np.random.default_rng(VAL_SAMPLE_SEED).choice(len(dataset), n, replace=False))
    split = replace(dataset.split, window_starts=np.asarray(dataset.split.window_starts)[pick])
    return WindowDataset(split, dataset.lookback, dataset.horizon, dataset.target_scale)

def lr_at(step: int, total_steps: int, config: TrainConfig) -> float:
    """Learning rate at optimizer step ``step`` (0-based) of ``total_steps``."""
    if config.schedule == "constant" or total_steps <= 1:
        return config.lr
    progress = min(step / (total_steps - 1), 1.0)
    floor = config.lr * config.min_lr_fraction
    if config.schedule == "onecycle":  # linear up to lr at 30%, cosine down to floor / 100
        peak = 0.3
        if progress < peak:
            start = config.lr / 25.0
            return start + (config.lr - start) * progress / peak
        frac = (progress - peak) / (1 - peak)
        return floor / 100 + (config.lr - floor / 100) * 0.5 * (1 + math.cos(math.pi * frac))
    warmup = config.warmup_fraction
    if progress < warmup:
        return config.lr * (step + 1) / max(1, round(warmup * total_steps))
    frac = (progress - warmup) / max(1e-12, 1 - warmup)
    return floor + (config.lr - floor) * 0.5 * (1 + math.cos(math.pi * frac))


class World:
    """Where the loop runs: one process, the default. ``models.training.distributed``
    subclasses it for a rank of a DDP process group, so data parallelism is a world size
    of this loop, not a second loop. Each hook is the identity for one process."""

    rank = 0
    size = 1

    def seed(self, seed: int, epoch: int | None) -> None:
        """Seed torch's generator: once before training (``epoch=None``) for one process."""
        if epoch is None:
            torch.manual_seed(seed)

    def wrap(self, model: nn.Module, device: torch.device) -> nn.Module:
        return model

    def shard(self, indices: np.ndarray) -> np.ndarray:
        return indices

    def batch_loss(self, local_loss: torch.Tensor, n_local: int, n_global: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """(what to back-propagate, the global batch's mean loss)."""
        return local_loss, local_loss

    def sum_over_ranks(self, total: float, count: int) -> tuple[float, float]:
        return total, count

    def barrier(self) -> None:
        pass

    def metadata(self) -> dict[str, Any]:
        return {}

    def where(self) -> str:
        return ""


def train_forecaster(
    model: nn.Module,
    data: TrainingData,
    config: TrainConfig,
    *,
    device: torch.device | str = "cpu",
    autocast_dtype: torch.dtype | None = None,
    checkpoint_dir: Path | None = None,
    resume: bool = False,
    on_epoch_end: Callable[[dict[str, float]], None] | None = None,
    progress: bool = False,
    world: World | None = None,
) -> TrainResult:
    """Train ``model`` on ``data``'s train split, early-stopping on validation quantile
    loss. With ``checkpoint_dir``, ``last.safetensors`` (weights, optimizer, loop
    state) is written every epoch and ``best.safetensors`` whenever validation
    improves; ``resume=True`` continues from ``last.safetensors`` if it exists. The
    model ends holding the best weights seen. ``world`` (default: one process) is where
    the loop runs; ``config.batch_size`` is always the global batch. A model with
    ``members`` (a deep ensemble) trains them as ``_train_members`` says."""
    device = torch.device(device)
    previous_threads = torch.get_num_threads()
    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    try:
        train = _train_members if isinstance(getattr(model, "members", None), nn.ModuleList) \
            else _train
        world = world or World()
        result = train(model, data, config, device, autocast_dtype,
                       Path(checkpoint_dir) if checkpoint_dir is not None else None,
                       resume, on_epoch_end, progress, world)
        full = data.window_dataset("validation")
        if validation_sample(full, config.val_windows) is not full:
            result.full_val_loss = evaluate_loss(
                model, full, torch.tensor(model.config.quantiles, dtype=torch.float32),
                config.eval_batch_size, device, autocast_dtype, world=world)
        return result
    finally:
        if config.num_threads:
            torch.set_num_threads(previous_threads)


@dataclass
class _Run:
    """Everything one ``train_forecaster`` call carries from epoch to epoch."""

    model: nn.Module
    net: nn.Module  # ``model`` as the world wraps it (DDP on a rank)
    train_ds: WindowDataset
    val_ds: WindowDataset
    config: TrainConfig
    device: torch.device
    autocast_dtype: torch.dtype | None
    world: World
    quantiles: torch.Tensor
    scaler: torch.amp.GradScaler | None
    optimizer: torch.optim.Optimizer
    steps_per_epoch: int
    total_steps: int
    model_type: str
    base_extra: dict[str, Any]
    checkpoint_dir: Path | None
    last_path: Path | None
    best_path: Path | None
    state: dict[str, Any]  # the loop state a checkpoint saves: epoch, step, best, history
    best_state: dict[str, Any]  # the best weights seen
    bar: Any = None

    @property
    def is_main(self) -> bool:
        return self.world.rank == 0

    def last_good(self) -> Path | None:
        return self.last_path if self.last_path is not None and self.last_path.is_file() else None


@dataclass
class _EpochStats:
    losses: list[float] = field(default_factory=list)
    norms: list[float] = field(default_factory=list)
    n_samples: int = 0
    started: float = field(default_factory=time.perf_counter)
    train_seconds: float = 0.0


def _train(model, data, config, device, autocast_dtype, checkpoint_dir, resume, on_epoch_end,
           progress, world: World) -> TrainResult:
    run = _start(model, data, config, device, autocast_dtype, checkpoint_dir, resume, world)
    n_parameters = int(sum(p.numel() for p in model.parameters()))
    run.bar = _progress_bar(run.total_steps, run.state["step"], progress and run.is_main)
    started = time.perf_counter()
    stopped_early = False
    try:
        while run.state["epoch"] < config.epochs:
            epoch = run.state["epoch"] + 1
            stats = _train_epoch(run, epoch)
            val_loss = evaluate_loss(model, run.val_ds, run.quantiles, config.eval_batch_size,
                                     device, autocast_dtype, config.max_val_batches, world=world)
            record, improved = _end_epoch(run, epoch, stats, val_loss)
            if improved:
                run.best_state = copy.deepcopy(model.state_dict())
            if on_epoch_end is not None and run.is_main:
                on_epoch_end(dict(record))
            if checkpoint_dir is not None:
                world.barrier()  # a resume after this epoch finds rank 0's files complete
            if config.patience is not None and run.state["bad_epochs"] >= config.patience:
                stopped_early = run.state["epoch"] < config.epochs
                break
    finally:
        if run.bar is not None:
            run.bar.close()
    model.load_state_dict(run.best_state)
    return _result(run, n_parameters, time.perf_counter() - started, stopped_early)


def _train_members(model, data, config, device, autocast_dtype, checkpoint_dir, resume,
                   on_epoch_end, progress, world: World) -> TrainResult:
    """A deep ensemble's members trained one after another as independent models: member
    ``i`` with seed ``config.seed + i`` (batch order, dropout), its own early stopping on its
    own validation loss and its own checkpoints (``member-<i>/``); its history rows carry
    ``member``. The result's ``best_val_loss`` is the average's. Trained side by side in
    one loss on the same batches instead, two TFT members forecast no better than one (seed
    7's walk-forward pinball .3883, one TFT's .3883); trained apart, .3844."""
    results = []
    for i, member in enumerate(model.members):
        def hook(row: dict[str, float], i: int = i) -> None:
            on_epoch_end({**row, "member": i})
        results.append(_train(member, data, replace(config, seed=config.seed + i), device,
                              autocast_dtype,
                              checkpoint_dir / f"member-{i}" if checkpoint_dir else None, resume,
                              hook if on_epoch_end is not None else None, progress, world))
    val_loss = evaluate_loss(model, validation_sample(data.window_dataset("validation"),
                                                      config.val_windows),
                             torch.tensor(model.config.quantiles, dtype=torch.float32),
                             config.eval_batch_size, device, autocast_dtype,
                             config.max_val_batches, world=world)
    return TrainResult(
        best_val_loss=val_loss,
        best_epoch=max(r.best_epoch for r in results),
        epochs_run=sum(r.epochs_run for r in results),
        history=[{**row, "member": i} for i, r in enumerate(results) for row in r.history],
        best_checkpoint=None, last_checkpoint=None,  # one per member, under member-<i>/
        training_seconds=sum(r.training_seconds for r in results),
        n_parameters=int(sum(p.numel() for p in model.parameters())),
        stopped_early=any(r.stopped_early for r in results),
    )


def _start(model: nn.Module, data: TrainingData, config: TrainConfig, device: torch.device,
           autocast_dtype: torch.dtype | None, checkpoint_dir: Path | None, resume: bool,
           world: World) -> _Run:
    """Datasets checked, model on its device, optimizer built, and the loop state (fresh,
    or from ``last.safetensors`` when resuming)."""
    train_ds = data.window_dataset("train")
    val_ds = validation_sample(data.window_dataset("validation"), config.val_windows)
    if len(train_ds) == 0:
        raise ValueError("training split has no windows")
    if len(val_ds) == 0:
        raise ValueError("validation split has no windows (needed for early stopping)")
    world.seed(config.seed, None)
    model.to(device)
    quantiles = torch.tensor(model.config.quantiles, dtype=torch.float32, device=device)
    use_scaler = autocast_dtype == torch.float16 and device.type == "cuda"
    steps_per_epoch = math.ceil(len(train_ds) / config.batch_size)
    if config.max_batches_per_epoch:
        steps_per_epoch = min(steps_per_epoch, config.max_batches_per_epoch)
    last_path = checkpoint_dir / LAST_NAME if checkpoint_dir else None
    best_path = checkpoint_dir / BEST_NAME if checkpoint_dir else None
    resume_from = last_path if resume and last_path is not None and last_path.is_file() else None
    state, best_state = _resume_state(model, resume_from, best_path)
    net = world.wrap(model, device)
    optimizer = torch.optim.AdamW(net.parameters(), lr=config.lr, betas=config.betas,
                                  eps=config.eps, weight_decay=config.weight_decay)
    if resume_from is not None:
        load_optimizer_state(resume_from, optimizer)
    return _Run(
        model=model, net=net, train_ds=train_ds, val_ds=val_ds, config=config, device=device,
        autocast_dtype=autocast_dtype, world=world, quantiles=quantiles,
        scaler=torch.amp.GradScaler("cuda") if use_scaler else None, optimizer=optimizer,
        steps_per_epoch=steps_per_epoch, total_steps=steps_per_epoch * config.epochs,
        model_type=model_type_of(model),
        base_extra={**dataset_signature(data), "train_config": config.to_dict(),
                    **world.metadata(), **config.extra_metadata},
        checkpoint_dir=checkpoint_dir, last_path=last_path, best_path=best_path, state=state,
        best_state=best_state)


def _resume_state(model: nn.Module, resume_from: Path | None, best_path: Path | None
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(loop state, best weights): fresh ones, or those ``resume_from`` saved (its weights
    loaded into ``model`` and torch's generator restored; every rank reads it)."""
    state = {"epoch": 0, "step": 0, "best_val": math.inf, "best_epoch": 0, "bad_epochs": 0,
             "history": []}
    if resume_from is not None:
        meta = read_checkpoint_meta(resume_from)
        model_type = model_type_of(model)
        if meta.get("model_type") != model_type or meta.get("config") != model.config.to_dict():
            raise ValueError(f"{resume_from}: saved for {meta.get('model_type')} "
                             f"{meta.get('config')}, cannot resume a different model")
        _load_weights(model, resume_from)
        state = meta["loop_state"]
        torch.set_rng_state(torch.tensor(meta["torch_rng_state"], dtype=torch.uint8))
    best_state = copy.deepcopy(model.state_dict())
    if resume_from is not None and best_path is not None and best_path.is_file():
        best_model = copy.deepcopy(model)
        _load_weights(best_model, best_path)
        best_state = best_model.state_dict()
    return state, best_state


def _train_epoch(run: _Run, epoch: int) -> _EpochStats:
    """One pass over the (seeded, shuffled) train windows, one optimizer step per batch."""
    run.world.seed(run.config.seed, epoch)
    run.net.train()
    stats = _EpochStats()
    order = np.random.default_rng([run.config.seed, epoch]).permutation(len(run.train_ds))
    for global_idx in _chunks(order, run.config.batch_size, run.steps_per_epoch):
        loss, grad_norm = _train_step(run, epoch, global_idx)
        stats.losses.append(loss)
        stats.norms.append(grad_norm)
        stats.n_samples += len(global_idx)
        if run.bar is not None:
            run.bar.update(1)
            run.bar.set_postfix(epoch=epoch, loss=f"{stats.losses[-1]:.4f}")
    stats.train_seconds = time.perf_counter() - stats.started
    return stats


def _train_step(run: _Run, epoch: int, global_idx: np.ndarray) -> tuple[float, float]:
    """Forward, divergence checks, backward and step on this rank's share of one global
    batch; returns (the global batch's loss, the gradient norm)."""
    config, optimizer, scaler = run.config, run.optimizer, run.scaler
    local_idx = run.world.shard(global_idx)
    step = run.state["step"] + 1
    lr = lr_at(run.state["step"], run.total_steps, config)
    for group in optimizer.param_groups:
        group["lr"] = lr
    batch = to_device(run.train_ds.batch(local_idx), run.device)
    with _autocast(run.device, run.autocast_dtype):
        pred = run.net(batch["static"], batch["observed"], batch["known"])
    objective, loss = run.world.batch_loss(
        pinball_loss(pred.float(), batch["target"], run.quantiles),
        len(local_idx), len(global_idx))
    last_good = run.last_good()
    if not torch.isfinite(loss):
        raise TrainingDivergedError(
            f"loss is {loss.item()} at epoch {epoch}, step {step}{run.world.where()}; "
            f"last good checkpoint: {last_good}", epoch=epoch, step=step,
            last_good_checkpoint=last_good)
    optimizer.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.scale(objective).backward()
        scaler.unscale_(optimizer)
    else:
        objective.backward()
    max_norm = config.grad_clip if config.grad_clip else math.inf
    grad_norm = torch.nn.utils.clip_grad_norm_(run.net.parameters(), max_norm)
    if not torch.isfinite(grad_norm) and scaler is None:
        raise TrainingDivergedError(
            f"gradient norm is {grad_norm.item()} at epoch {epoch}, step {step}; "
            f"last good checkpoint: {last_good}", epoch=epoch, step=step,
            last_good_checkpoint=last_good)
    if scaler is not None:  # fp16: an inf norm means 'skip this step, lower scale'
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    run.state["step"] = step
    return loss.item(), grad_norm.item()


def _end_epoch(run: _Run, epoch: int, stats: _EpochStats, val_loss: float
               ) -> tuple[dict[str, float], bool]:
    """The epoch's record, the divergence check, best tracking and best/last checkpoints.
    Returns (record, improved)."""
    state = run.state
    record = {
        "epoch": epoch,
        "train_loss": float(np.mean(stats.losses)),
        "val_loss": val_loss,
        "grad_norm": float(np.mean(stats.norms)),
        "grad_norm_max": float(np.max(stats.norms)),
        "lr": float(run.optimizer.param_groups[0]["lr"]),
        "seconds": time.perf_counter() - stats.started,
        "samples_per_s": stats.n_samples / max(stats.train_seconds, 1e-9),
    }
    state["history"].append(record)
    state["epoch"] = epoch
    if not math.isfinite(val_loss):
        raise TrainingDivergedError(
            f"validation loss is {val_loss} after epoch {epoch}", epoch=epoch,
            step=state["step"], last_good_checkpoint=run.last_good())
    improved = val_loss < state["best_val"] - run.config.min_delta
    if improved:
        state["best_val"], state["best_epoch"], state["bad_epochs"] = val_loss, epoch, 0
    else:
        state["bad_epochs"] += 1
    if run.checkpoint_dir is not None and run.is_main:
        _save_epoch_checkpoints(run, epoch, val_loss, improved)
    return record, improved


def _save_epoch_checkpoints(run: _Run, epoch: int, val_loss: float, improved: bool) -> None:
    """``best`` when validation improved, ``last`` (with optimizer, loop state and torch's
    generator, all a resume needs) every epoch."""
    model = run.model
    extra = {**run.base_extra, "epoch": epoch, "val_loss": val_loss}
    if improved:
        save_checkpoint(run.best_path, model, model_type=run.model_type,
                        config=model.config.to_dict(), extra=extra)
    save_checkpoint(run.last_path, model, model_type=run.model_type,
                    config=model.config.to_dict(), optimizer=run.optimizer,
                    extra={**extra, "loop_state": run.state,
                           "torch_rng_state": torch.get_rng_state().tolist()})


def _result(run: _Run, n_parameters: int, seconds: float, stopped_early: bool) -> TrainResult:
    best, last = run.best_path, run.last_path
    return TrainResult(
        best_val_loss=float(run.state["best_val"]),
        best_epoch=int(run.state["best_epoch"]),
        epochs_run=int(run.state["epoch"]),
        history=list(run.state["history"]),
        best_checkpoint=best if best is not None and best.is_file() else None,
        last_checkpoint=last if last is not None and last.is_file() else None,
        training_seconds=seconds,
        n_parameters=n_parameters,
        stopped_early=stopped_early,
    )


@torch.no_grad()
def evaluate_loss(model: nn.Module, dataset: WindowDataset, quantiles: torch.Tensor,
                  batch_size: int = 512, device: torch.device | str = "cpu",
                  autocast_dtype: torch.dtype | None = None,
                  max_batches: int | None = None, *, world: World | None = None) -> float:
    """Mean pinball loss over ``dataset`` (sample-weighted across batches). In a DDP
    ``world`` each rank scores its shard of the same windows and the sums are all-reduced,
    so every rank gets the same number."""
    device = torch.device(device)
    world = world or World()
    was_training = model.training
    model.eval()
    n = len(dataset) if max_batches is None else min(len(dataset), max_batches * batch_size)
    total, count = 0.0, 0
    for idx in _chunks(world.shard(np.arange(n)), batch_size, None):
        batch = to_device(dataset.batch(idx), device)
        with _autocast(device, autocast_dtype):
            pred = model(batch["static"], batch["observed"], batch["known"])
        total += pinball_loss(pred.float(), batch["target"], quantiles.to(device)).item() * len(idx)
        count += len(idx)
    model.train(was_training)
    total, count = world.sum_over_ranks(total, count)
    return total / max(count, 1)


@torch.no_grad()
def predict_quantiles(model: nn.Module, split_dataset: WindowDataset, batch_size: int = 512,
                      device: torch.device | str = "cpu",
                      autocast_dtype: torch.dtype | None = None) -> np.ndarray:
    """``[W, H, Q]`` float32 predictions in target-scaled units (targets / target_scale)."""
    device = torch.device(device)
    was_training = model.training
    model.eval().to(device)
    out = []
    for idx in _chunks(np.arange(len(split_dataset)), batch_size, None):
        batch = to_device(split_dataset.batch(idx), device)
        with _autocast(device, autocast_dtype):
            pred = model(batch["static"], batch["observed"], batch["known"])
        out.append(pred.float().cpu().numpy())
    model.train(was_training)
    n_q = len(model.config.quantiles)
    if not out:
        return np.zeros((0, split_dataset.horizon, n_q), dtype=np.float32)
    return np.concatenate(out, axis=0)


def scaled_targets(dataset: WindowDataset) -> np.ndarray:
    """``[W, H]`` targets of every window, scaled like the model's outputs."""
    split = dataset.split
    last = np.asarray(split.window_starts, dtype=np.int64) + dataset.lookback - 1
    return np.asarray(split.targets[last], dtype=np.float64) / dataset.target_scale


def climatology_quantiles(data: TrainingData, quantiles: tuple[float, ...] | None = None
                          ) -> np.ndarray:
    """``[H, Q]`` unconditional quantiles of the training windows' scaled targets:
    the baseline a forecaster must beat (one definition, in ``models.climatology``), as float32."""
    return climatology.climatology_quantiles(data, quantiles).astype(np.float32)


def quantile_loss_of(preds: np.ndarray, targets: np.ndarray, quantiles) -> float:
    """Mean pinball loss of ``preds`` ([W, H, Q] or a broadcastable [H, Q]) on ``targets``
    [W, H]; the same number ``train_forecaster`` reports as ``val_loss``."""
    return pinball_loss(preds, targets, quantiles)


# --- internals ---------------------------------------------------------------


def _chunks(order: np.ndarray, size: int, limit: int | None) -> Iterator[np.ndarray]:
    for i, start in enumerate(range(0, len(order), size)):
        if limit is not None and i >= limit:
            return
        yield order[start:start + size]


def _autocast(device: torch.device, dtype: torch.dtype | None):
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def _load_weights(model: nn.Module, path: Path) -> None:
    state = {k: v for k, v in load_file(str(checkpoint_file(path))).items()
             if not k.startswith(OPTIMIZER_PREFIX)}
    model.load_state_dict(state, strict=True)


def _progress_bar(total: int, initial: int, enabled: bool):
    if not enabled:
        return None
    return tqdm(total=total, initial=initial, unit="batch", dynamic_ncols=True)
