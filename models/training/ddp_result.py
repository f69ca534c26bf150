"""The rank-0 result of a data-parallel (torchrun) training as the asset reads it."""

from __future__ import annotations


class DDPResult:
    """The rank-0 result of a torchrun launch, shaped like models.training.loop.TrainResult."""

    def __init__(self, r: dict):
        self.history = list(r.get("history", []))
        self.best_val_loss = float(r["best_val_loss"])
        self.epochs_run = int(r["epochs_run"])
        self.n_parameters = int(r["n_parameters"])
        self.training_seconds = float(r["training_seconds"])
        self.checkpoint = r["checkpoint"]
