"""The code location on Kubernetes (``dagster api grpc -m foxhunt_pipeline.k8s_definitions``):
the laptop's definitions with each step run as its own Kubernetes Job."""

from __future__ import annotations

import dagster as dg

from foxhunt_pipeline.definitions import defs as local_defs
from foxhunt_pipeline.deploy_profile import k8s_executor

defs = dg.Definitions.merge(local_defs, dg.Definitions(executor=k8s_executor()))
