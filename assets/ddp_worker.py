"""The ``torchrun`` target for data-parallel forecaster training.

    torchrun --standalone --nproc-per-node 2 -m assets.ddp_worker --spec spec.json

Every rank loads the dataset, builds the same model from the registry and trains with
``models.training.distributed.train_forecaster_ddp``. Rank 0 alone writes the checkpoints and
``result.json`` and, when started through Dagster Pipes (``PipesSubprocessClient``),
logs each epoch and reports the result once as a custom message. Any rank that fails
writes ``errors/rank<r>.json`` (time, type, message, traceback) before exiting non-zero,
so the launcher can fail the asset with the first rank's own error instead of the
secondary "peer closed the connection" errors of the others.

The spec (JSON) holds ``family``, ``model_params``, ``train_params`` (``TrainConfig``
fields), ``dataset_path``, ``out_dir`` and optionally ``device`` (``auto`` | ``cpu`` |
``cuda``) and ``autocast`` (``bfloat16`` | ``float16`` | null).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from dagster_pipes import open_dagster_pipes

from foxhunt_pipeline.basics.atomic import atomic_write
from models.registry import build_model
from models.training.checkpoint import dataset_signature, save_checkpoint
from models.training.ddp_protocol import ERRORS_DIR, RESULT_MESSAGE_KIND, model_config_for
from models.training.distributed import (
    DistEnv,
    backend_for,
    device_for,
    init_distributed,
    train_forecaster_ddp,
)
from models.training.loop import TrainConfig, TrainResult
from models.windows import TrainingData

RESULT_NAME = "result.json"
REQUIRED_SPEC_KEYS = ("family", "model_params", "train_params", "dataset_path", "out_dir")
AUTOCAST_DTYPES = {"bfloat16", "float16"}


def load_spec(path: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(path)
    try:
        spec = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read the DDP spec ({exc})") from exc
    missing = [k for k in REQUIRED_SPEC_KEYS if k not in spec]
    if missing:
        raise ValueError(f"{path}: DDP spec lacks {missing}")
    if spec.get("autocast") not in (None, *AUTOCAST_DTYPES):
        raise ValueError(f"{path}: autocast must be one of {sorted(AUTOCAST_DTYPES)} or null, "
                         f"got {spec['autocast']!r}")
    return spec


def write_rank_error(out_dir: str | os.PathLike[str], rank: int, exc: BaseException) -> Path:
    """``errors/rank<r>.json``: what this rank died of, for the launcher to report."""
    text = json.dumps({
        "rank": rank, "time": time.time(), "type": type(exc).__name__, "message": str(exc),
        "traceback": "".join(traceback.format_exception(exc)),
    })
    return atomic_write(Path(out_dir) / ERRORS_DIR / f"rank{rank}.json",
                        lambda tmp: tmp.write_text(text))


def train(spec: dict[str, Any], reporter=None) -> dict[str, Any]:
    """Run this rank's share of the job; rank 0 returns (and writes) the result."""
    env = DistEnv.from_env()
    device = device_for(env, spec.get("device", "auto"))
    init_distributed(device, float(spec.get("timeout_s", 600)))
    config = TrainConfig.from_dict(dict(spec["train_params"]))
    data = _load_dataset(Path(spec["dataset_path"]))
    model_config = model_config_for(spec["family"], data, dict(spec["model_params"]))
    torch.manual_seed(config.seed)  # same init everywhere; DDP also broadcasts rank 0's
    model = build_model(spec["family"], model_config)
    out_dir = Path(spec["out_dir"])
    autocast = getattr(torch, spec["autocast"]) if spec.get("autocast") else None
    result = train_forecaster_ddp(
        model, data, config, device=device, autocast_dtype=autocast,
        checkpoint_dir=out_dir / "train_state", resume=bool(spec.get("resume", False)),
        on_epoch_end=_epoch_line(spec["family"], env.world_size, reporter),
    )
    summary: dict[str, Any] = {}
    if env.is_main:
        ckpt = save_checkpoint(
            out_dir / "model", model, model_type=spec["family"], config=model_config,
            extra={**dataset_signature(data), "world_size": env.world_size},
        )
        summary = _summary(spec["family"], ckpt, out_dir, model_config, result, env, device)
        atomic_write(out_dir / RESULT_NAME, lambda tmp: tmp.write_text(json.dumps(summary, indent=2)))
        if reporter is not None:
            reporter.report_custom_message(summary)
    dist.barrier()  # no rank exits (and tears the group down) before rank 0 has written
    return summary


def _load_dataset(dataset_path: Path) -> TrainingData:
    """The dataset every rank trains on (the same local copy)."""
    if not (dataset_path / "meta.json").is_file():
        raise FileNotFoundError(f"{dataset_path / 'meta.json'}: no training dataset there")
    return TrainingData.load(dataset_path)


def _epoch_line(family: str, world_size: int, reporter) -> Callable[[dict], None]:
    """Per epoch a progress line, through Pipes when launched by it, else on stdout."""
    def on_epoch_end(row: dict) -> None:
        line = (f"{family} epoch {row['epoch']}: train {row['train_loss']:.5f} "
                f"val {row['val_loss']:.5f} grad_norm {row['grad_norm']:.3f} "
                f"({row['samples_per_s']:.0f} samples/s on {world_size} ranks)")
        if reporter is not None:
            reporter.log.info(line)
        else:
            print(line, flush=True)

    return on_epoch_end


def _summary(family: str, ckpt: Path, out_dir: Path, model_config: dict[str, Any],
             result: TrainResult, env: DistEnv, device: torch.device) -> dict[str, Any]:
    """Rank 0's result: what the launcher returns to the training asset."""
    return {
        "kind": RESULT_MESSAGE_KIND, "family": family, "checkpoint": str(ckpt),
        "train_state": str(out_dir / "train_state"), "model_config": model_config,
        "best_val_loss": result.best_val_loss, "best_epoch": result.best_epoch,
        "epochs_run": result.epochs_run, "history": result.history,
        "training_seconds": result.training_seconds, "n_parameters": result.n_parameters,
        "stopped_early": result.stopped_early, "world_size": env.world_size,
        "backend": backend_for(device), "device": str(device),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="JSON file describing the job")
    args = parser.parse_args(argv)
    spec = load_spec(args.spec)
    rank = int(os.environ.get("RANK", "0"))
    try:
        with _reporter(rank) as reporter:
            train(spec, reporter)
    except BaseException as exc:
        write_rank_error(spec["out_dir"], rank, exc)
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


@contextlib.contextmanager
def _reporter(rank: int):
    """Dagster Pipes on rank 0 when launched by a Pipes client, else nothing."""
    if rank != 0 or "DAGSTER_PIPES_CONTEXT" not in os.environ:
        yield None
        return
    with open_dagster_pipes() as pipes:
        yield pipes


if __name__ == "__main__":
    try:
        from torch.distributed.elastic.multiprocessing.errors import record
    except ImportError:  # pragma: no cover - torch without the elastic package
        sys.exit(main())
    sys.exit(record(main)())
