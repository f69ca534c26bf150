"""The code location on Kubernetes (``dagster api grpc -m foxhunt_pipeline.k8s_definitions``):
the laptop's definitions with each step run as its own Kubernetes Job."""

from __future__ import annotations

import dagster as dg

from foxhunt_pipeline import definitions as _local
from foxhunt_pipeline.deploy_profile import k8s_executor

# only one Definitions object may sit at module scope, so the local one stays in its module
defs = dg.Definitions.merge(_local.defs, dg.Definitions(executor=k8s_executor()))
