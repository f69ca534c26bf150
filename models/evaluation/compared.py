"""What every model is compared with on one protocol: the naive baselines, how many
candidates make skill claims (the Bonferroni count), and what a combination is by
construction."""

from __future__ import annotations

from pathlib import Path

from models import families
from models.ensemble.weights import sole_member
from models.evaluation.candidates import naive_baselines
from models.training.checkpoint import read_checkpoint_meta


def composition_equals(family: str, checkpoint: Path) -> str | None:
    """What a model is by construction: a combination (the ensemble) with all its weight on
    one member is that member ("baseline:climatology", "foxhunt-mamba2")."""
    if not families.family(family).combines:
        return None
    meta = read_checkpoint_meta(checkpoint)
    member = sole_member(meta.get("extra", meta).get("weights") or {})
    if member is None:
        return None
    return ("baseline:climatology" if member == "climatology"
            else families.family(member).registered_name)


def baseline_candidates() -> list:
    """The naive baselines every model is scored beside and must beat: flat, buy-and-hold,
    momentum and the climatology (LightGBM is a family of its own)."""
    return naive_baselines((1,))


def n_compared() -> int:
    """Models and baselines that make skill claims on one protocol (the Bonferroni count)."""
    return len(families.ALL) + len(baseline_candidates())
