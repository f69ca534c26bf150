"""What the TFT looks at, averaged over a split: mean variable-selection weights (static,
encoder = past observed + known, decoder = future known) and the head-averaged attention of
each forecast horizon over the lookback (Lim et al. 2021, section 7). Computed on the
validation split so the explanation describes data the weights were not fitted to."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from models.windows import TrainingData


@dataclass
class Interpretation:
    """Mean weights per named input (each group sums to ~1) and attention ``[H, T + H]``."""

    static: dict[str, float]
    encoder: dict[str, float]
    decoder: dict[str, float]
    attention: np.ndarray
    lookback: int
    n_windows: int
    split: str

    def top(self, group: str, k: int = 20) -> list[tuple[str, float]]:
        weights: dict[str, float] = getattr(self, group)
        return sorted(weights.items(), key=lambda kv: -kv[1])[:k]

    def rows(self) -> list[dict]:
        """One row per (group, feature): weight and rank within the group (1 = largest)."""
        out = []
        for group in ("static", "encoder", "decoder"):
            for rank, (name, w) in enumerate(self.top(group, k=10**9), 1):
                out.append({"group": group, "feature": name, "weight": w, "rank": rank})
        return out


def interpret(model: torch.nn.Module, data: TrainingData, *, split: str = "validation",
              max_windows: int = 512, batch_size: int = 128) -> Interpretation:
    """Averages ``forward_with_interpretation`` over up to ``max_windows`` evenly spaced
    windows of ``split`` (CPU, no gradients)."""
    if split not in data.splits or data.splits[split].n_windows == 0:
        raise ValueError(f"split {split!r} has no windows to interpret")
    ds = data.window_dataset(split)
    idx = np.unique(np.linspace(0, len(ds) - 1, min(max_windows, len(ds))).astype(np.int64))
    sums: dict[str, torch.Tensor] = {}
    model = model.eval()
    device = next(model.parameters()).device
    with torch.no_grad():
        for lo in range(0, idx.size, batch_size):
            b = ds.batch(idx[lo : lo + batch_size])
            _, info = model.forward_with_interpretation(b["static"].to(device), b["observed"].to(device),
                                                        b["known"].to(device))
            for key, dims in (("static_weights", (0,)), ("past_weights", (0, 1)), ("future_weights", (0, 1)),
                              ("attention", (0,))):
                if key in info:
                    s = info[key].float().sum(dim=dims[0]).cpu() if len(dims) == 1 else \
                        info[key].float().mean(dim=1).sum(dim=0).cpu()
                    sums[key] = sums.get(key, 0) + s
    n = float(idx.size)
    mean = {k: (v / n).numpy() for k, v in sums.items()}
    past_names = [*data.observed_names, *data.known_names]
    return Interpretation(
        static=_named(data.static_names, mean.get("static_weights")),
        encoder=_named(past_names, mean.get("past_weights")),
        decoder=_named(data.known_names, mean.get("future_weights")),
        attention=mean.get("attention", np.zeros((data.horizon, data.lookback + data.horizon))),
        lookback=data.lookback, n_windows=int(idx.size), split=split,
    )


def _named(names: list[str], weights: np.ndarray | None) -> dict[str, float]:
    if weights is None:
        return {}
    if len(names) != weights.shape[-1]:
        names = [f"input_{i}" for i in range(weights.shape[-1])]
    return {n: float(w) for n, w in zip(names, weights, strict=True)}


__all__ = ["Interpretation", "interpret"]
