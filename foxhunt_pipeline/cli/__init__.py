"""The ``foxhunt`` command line (``commands``), the persistent Dagster instance it shares
with the UI (``instance``), the MLflow UI next to Dagster's (``mlflow_ui``) and
materialization from the shell (``runner``)."""
