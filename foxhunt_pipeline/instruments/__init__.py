"""CME products and contracts: root specifications and contract symbols (``specs``), and
the volume roll from outright contracts to one continuous series per root (``rolls``)."""

from foxhunt_pipeline.instruments.specs import ROOTS, RootSpec, parse_outright, spec

__all__ = ["ROOTS", "RootSpec", "parse_outright", "spec"]
