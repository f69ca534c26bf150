"""The loss curve of a training run as a PNG (train and validation loss per epoch, one pair
of curves per deep-ensemble member)."""

from __future__ import annotations

from pathlib import Path


def loss_curve_png(history: list[dict], path: Path, title: str) -> Path:
    # lazy: matplotlib is not needed to load the code location, only to draw
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    members = sorted({int(h.get("member", 0)) for h in history}) or [0]
    for member in members:  # a deep ensemble: one pair of curves per member
        rows = [h for h in history if int(h.get("member", 0)) == member]
        which = f" (member {member + 1})" if len(members) > 1 else ""
        for key in ("train_loss", "val_loss"):
            ax.plot([h["epoch"] for h in rows], [h.get(key) for h in rows], marker="o",
                    label=key + which)
    ax.set_xlabel("epoch")
    ax.set_ylabel("quantile loss")
    ax.set_title(f"{title} training")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
