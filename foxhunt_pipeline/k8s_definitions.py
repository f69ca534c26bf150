"""The code location on Kubernetes (``dagster api grpc -m foxhunt_pipeline.k8s_definitions``):
the laptop's definitions with each step run as its own Kubernetes Job."""

from __future__ import annotations

import dagster as dg

from foxhunt_pipeline import definitions
from foxhunt_pipeline.config.deploy_profile import STEP_K8S_CONFIG, active_deploy_profile


def k8s_executor(max_concurrent: int = 8):
    """``k8s_job_executor``: one Kubernetes Job per step, in the run launcher's namespace and
    image; ``max_concurrent`` pods per run (the ``gpu`` pool caps training across runs)."""
    try:
        from dagster_k8s import k8s_job_executor
    except ImportError as exc:
        raise ImportError("the Kubernetes profile needs the k8s extra: "
                          "pip install 'foxhunt-pipeline[k8s]'") from exc
    return k8s_job_executor.configured(
        {"max_concurrent": max_concurrent, "step_k8s_config": STEP_K8S_CONFIG},
        name="foxhunt_k8s",
    )


def executor_for_profile(profile: str | None = None):
    """The executor for ``Definitions(executor=...)``: None (Dagster's default multiprocess
    executor) locally, ``k8s_executor()`` on Kubernetes."""
    return k8s_executor() if (profile or active_deploy_profile()) == "k8s" else None


# only one Definitions object may sit at module scope, so the local one stays in its module
defs = dg.Definitions.merge(definitions.defs, dg.Definitions(executor=k8s_executor()))
