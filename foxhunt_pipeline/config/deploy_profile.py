"""The Kubernetes deployment profile: the k8s step executor and the pod settings of
training steps, in code so the Helm values only say *where* things run.

Training steps ask for GPUs through the ``dagster-k8s/config`` op tag (read by
``k8s_job_executor`` when it builds each step's pod): a ``nvidia.com/gpu`` request and
limit, a node selector for GPU nodes and a toleration for their usual taint. Everything
else gets the executor's small CPU default. ``dagster-k8s`` is the optional ``k8s``
extra, used only by the shell (``foxhunt_pipeline.k8s_definitions``).
"""

from __future__ import annotations

import json
import os
from typing import Any

DEPLOY_PROFILE_ENV = "FOXHUNT_DEPLOY_PROFILE"
TRAINING_GPUS_ENV = "FOXHUNT_TRAINING_GPUS"
GPU_NODE_SELECTOR_ENV = "FOXHUNT_GPU_NODE_SELECTOR"
K8S_CONFIG_TAG = "dagster-k8s/config"
GPU_RESOURCE = "nvidia.com/gpu"
# label set by NVIDIA GPU feature discovery / the GPU operator on every GPU node
DEFAULT_GPU_NODE_SELECTOR = {"nvidia.com/gpu.present": "true"}
DEPLOY_PROFILES = ("local", "k8s")

STEP_K8S_CONFIG: dict[str, Any] = {  # every non-training step (ingest, features, evaluation)
    "container_config": {
        "resources": {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"memory": "8Gi"}},
    },
}


def active_deploy_profile() -> str:
    name = os.environ.get(DEPLOY_PROFILE_ENV, "local") or "local"
    if name not in DEPLOY_PROFILES:
        raise ValueError(f"{DEPLOY_PROFILE_ENV}={name!r}: choose one of {', '.join(DEPLOY_PROFILES)}")
    return name


def gpu_step_k8s_config(gpus: int | None = None, node_selector: dict[str, str] | None = None,
                        cpu: str = "4", memory: str = "32Gi") -> dict[str, Any]:
    """Pod settings of one training step: ``gpus`` (default ``$FOXHUNT_TRAINING_GPUS`` or 1;
    match ``nproc_per_node`` for DDP) on a node matching ``node_selector`` (default
    ``$FOXHUNT_GPU_NODE_SELECTOR`` as JSON, else the GPU feature-discovery label)."""
    if gpus is None:
        gpus = int(os.environ.get(TRAINING_GPUS_ENV, "1"))
    if gpus < 1:
        raise ValueError(f"a training step needs at least one GPU, got {gpus}")
    if node_selector is None:
        raw = os.environ.get(GPU_NODE_SELECTOR_ENV)
        try:
            node_selector = json.loads(raw) if raw else dict(DEFAULT_GPU_NODE_SELECTOR)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{GPU_NODE_SELECTOR_ENV} is not JSON: {raw!r} ({exc})") from exc
    return {
        "container_config": {
            "resources": {
                "requests": {"cpu": cpu, "memory": memory, GPU_RESOURCE: str(gpus)},
                "limits": {"memory": memory, GPU_RESOURCE: str(gpus)},
            },
        },
        "pod_spec_config": {
            "node_selector": dict(node_selector),
            "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        },
    }


def training_op_tags(gpus: int | None = None) -> dict[str, Any]:
    """``op_tags`` for training assets (harmless outside Kubernetes: only dagster-k8s reads it)."""
    return {K8S_CONFIG_TAG: gpu_step_k8s_config(gpus)}
