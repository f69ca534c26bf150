"""Launch data-parallel training: ``torchrun`` under Dagster Pipes, one rank per device.

Training assets call ``launch_ddp_training`` when their config asks for
``nproc_per_node > 1``. Rank 0 of ``assets.ddp_worker`` logs each epoch and
reports the result once through Pipes; this side returns that result. When any rank
fails, the asset fails with the *first* failing rank's own error (each rank records
its exception in ``out_dir/errors``), not with the connection errors its peers see.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import dagster as dg

from assets.common.model_runs import dataset_path
from models.training.ddp_protocol import ERRORS_DIR, RESULT_MESSAGE_KIND
from models.training.ddp_result import DDPResult
from models.training.loop import TrainConfig

WORKER_MODULE = "assets.ddp_worker"
SPEC_NAME = "spec.json"


def torchrun_command(nproc_per_node: int, spec_path: Path, *, python: str = sys.executable
                     ) -> list[str]:
    """One node, a free local rendezvous port (``--standalone``), no restarts: a failed
    rank fails the step, and Dagster's retry policy decides about a rerun."""
    return [python, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={nproc_per_node}", "--max-restarts=0",
            "-m", WORKER_MODULE, "--spec", str(spec_path)]


def first_rank_error(out_dir: Path) -> dict[str, Any] | None:
    """The earliest error a rank recorded (the root cause; later ones are its echoes)."""
    errors = []
    for path in sorted((Path(out_dir) / ERRORS_DIR).glob("rank*.json")):
        try:
            errors.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    return min(errors, key=lambda e: (e["time"], e["rank"])) if errors else None


def _write_spec(out_dir: Path, spec: dict[str, Any]) -> Path:
    """``out_dir/spec.json`` for the ranks, with the errors of an earlier launch cleared."""
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out_dir / ERRORS_DIR, ignore_errors=True)
    spec_path = out_dir / SPEC_NAME
    spec_path.write_text(json.dumps(spec, indent=2))
    return spec_path


def _rank_failure(error: dict[str, Any], nproc_per_node: int) -> dg.Failure:
    """The asset's failure from the first failing rank's own error."""
    return dg.Failure(
        description=f"DDP rank {error['rank']} of {nproc_per_node} failed: "
                    f"{error['type']}: {error['message']}",
        metadata={"rank": error["rank"], "error_type": error["type"],
                  "traceback": dg.MetadataValue.text(error["traceback"])},
    )


def launch_ddp_training(
    context: dg.AssetExecutionContext | dg.OpExecutionContext,
    pipes_client: dg.PipesSubprocessClient,
    family: str,
    model_params: dict[str, Any],
    train_params: dict[str, Any],
    dataset_path: str | Path,
    out_dir: str | Path,
    nproc_per_node: int,
    *,
    device: str = "auto",
    autocast: str | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Train ``family`` on ``nproc_per_node`` ranks; returns rank 0's result (``checkpoint``,
    ``history``, ``best_val_loss``, ``model_config``, ...). ``train_params`` are
    ``models.training.loop.TrainConfig`` fields, ``batch_size`` being the global batch."""
    if nproc_per_node < 1:
        raise dg.Failure(f"nproc_per_node must be >= 1, got {nproc_per_node}")
    try:
        TrainConfig.from_dict(dict(train_params))  # bad config fails here, not in N ranks
    except (TypeError, ValueError) as exc:
        raise dg.Failure(f"train_params: {exc}") from exc
    out_dir = Path(out_dir)
    spec_path = _write_spec(out_dir, {
        "family": family, "model_params": dict(model_params), "train_params": dict(train_params),
        "dataset_path": str(dataset_path), "out_dir": str(out_dir), "device": device,
        "autocast": autocast, "resume": resume})
    context.log.info(f"{family}: DDP training on {nproc_per_node} ranks, global batch "
                     f"{train_params.get('batch_size', TrainConfig.batch_size)}, in {out_dir}")
    try:
        invocation = pipes_client.run(
            command=torchrun_command(nproc_per_node, spec_path), context=context,
            extras={"family": family, "nproc_per_node": nproc_per_node},
        )
    except Exception as exc:  # whatever the launch raised: re-raised unless a rank said why
        error = first_rank_error(out_dir)
        if error is None:
            raise
        raise _rank_failure(error, nproc_per_node) from exc
    results = [m for m in invocation.get_custom_messages()
               if isinstance(m, dict) and m.get("kind") == RESULT_MESSAGE_KIND]
    if len(results) != 1:
        raise dg.Failure(f"expected one result from rank 0, got {len(results)}")
    return results[0]


def fit_ddp(context, pipes_client, family, model_params, train_cfg, storage, run_dir, nproc, choice):
    """Train under torchrun with ``nproc`` ranks through Dagster Pipes; rank 0's result."""
    if pipes_client is None:
        raise dg.Failure("nproc_per_node > 1 needs the pipes_subprocess_client resource")
    autocast = str(choice.autocast_dtype).removeprefix("torch.") if choice.autocast_dtype else None
    r = launch_ddp_training(context, pipes_client, family, model_params, train_cfg.to_dict(),
                            dataset_path(storage), run_dir / "ddp", nproc,
                            device=choice.device.type, autocast=autocast)
    return DDPResult(r)
