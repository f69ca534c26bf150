"""Configuration that the domain, resources and assets share: where state lives
(``paths``), size profiles (``profiles``) and the Kubernetes step settings
(``deploy_profile``)."""

from foxhunt_pipeline.config.paths import FoxhuntPaths

__all__ = ["FoxhuntPaths"]
