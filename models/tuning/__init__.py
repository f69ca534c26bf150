"""Hyperparameter search with Optuna: the search space of each family (``spaces``), the
trial that trains on the train split and scores on the validation split with pruning
(``objective``), and the study in an RDB storage shared by every worker (``study``).
Dagster-free and MLflow-free: the ``tuning`` assets log trials through callbacks."""
