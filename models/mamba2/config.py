"""The sizes of a Mamba-2 forecaster (``models.mamba2.model``), apart from the network so
the block (``models.mamba2.mixer``) and the model both read it without importing each other."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from foxhunt_pipeline.basics.config_fields import check_known_fields
from models.windows import DEFAULT_QUANTILES

KERNELS = ("torch", "auto")



@dataclass
class Mamba2Config:
    n_static: int
    n_observed: int
    n_known: int
    lookback: int = 60
    horizon: int = 5
    quantiles: tuple[float, ...] = DEFAULT_QUANTILES
    hidden: int = 64  # d_model
    n_layers: int = 2
    d_state: int = 32
    d_conv: int = 4
    expand: int = 2
    # None: gcd(hidden * expand, 64), i.e. Mamba-2's 64 where it divides the inner width
    headdim: int | None = None
    ngroups: int = 1
    chunk_size: int = 32
    # On CPU, large inputs are scanned in blocks of about this many tokens (batch x
    # steps): rows apart first, then, for rows longer than that, time segments that
    # carry the (conv, SSM) state. Exact either way; it keeps the working set in
    # cache, so the cost stays linear in the length. 0 = one block. 2048 measured best
    # (vs 1024 and 3072) at batch 32 x T = 60 and 240, batch 64 x 60 and batch 1 x 3840.
    segment_tokens: int = 2048
    dropout: float = 0.1
    # "torch": the pure SSD scan (default, tested); "auto": mamba_ssm's fused
    # kernel when it is importable and the tensors are on CUDA, else "torch".
    kernel: str = "torch"

    def __post_init__(self) -> None:
        self.quantiles = tuple(float(q) for q in self.quantiles)
        if self.headdim is not None and int(self.headdim) < 1:
            raise ValueError(f"Mamba2Config.headdim must be >= 1 or None, got {self.headdim}")
        for name in ("n_static", "n_known"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"Mamba2Config.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("n_observed", "lookback", "horizon", "hidden", "n_layers", "d_state",
                     "d_conv", "expand", "ngroups", "chunk_size"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"Mamba2Config.{name} must be >= 1, got {getattr(self, name)}")
        if not self.quantiles or any(not 0.0 < q < 1.0 for q in self.quantiles) or any(
            b <= a for a, b in zip(self.quantiles, self.quantiles[1:], strict=False)
        ):
            raise ValueError(
                f"Mamba2Config.quantiles must be strictly increasing in (0, 1), got {self.quantiles}"
            )
        if self.d_inner % self.head_dim:
            raise ValueError(
                f"Mamba2Config: hidden * expand ({self.d_inner}) must be a multiple of "
                f"headdim ({self.headdim})"
            )
        if self.n_heads % self.ngroups:
            raise ValueError(
                f"Mamba2Config: heads ({self.n_heads}) must be a multiple of ngroups ({self.ngroups})"
            )
        if self.segment_tokens < 0:
            raise ValueError(f"Mamba2Config.segment_tokens must be >= 0, got {self.segment_tokens}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"Mamba2Config.dropout must be in [0, 1), got {self.dropout}")
        if self.kernel not in KERNELS:
            raise ValueError(f"Mamba2Config.kernel must be one of {KERNELS}, got {self.kernel!r}")

    @property
    def d_inner(self) -> int:
        return self.hidden * self.expand

    @property
    def n_heads(self) -> int:
        return self.d_inner // self.head_dim

    @property
    def head_dim(self) -> int:
        """``headdim`` resolved (``None`` -> ``gcd(d_inner, 64)``)."""
        return int(self.headdim) if self.headdim is not None else math.gcd(self.d_inner, 64)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["quantiles"] = list(self.quantiles)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Mamba2Config:
        check_known_fields(cls, d)
        return cls(**dict(d))
