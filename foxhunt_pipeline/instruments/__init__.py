"""CME products and contracts: root specifications and contract symbols (``specs``), the
volume roll from outright contracts to one continuous series per root (``rolls``) and the
front's share of its root's volume (``front_volume``), and the exchange sessions that tell a
hole in the data from a weekend or a holiday (``sessions``)."""

from foxhunt_pipeline.instruments.specs import ROOTS, RootSpec, parse_outright, spec

__all__ = ["ROOTS", "RootSpec", "parse_outright", "spec"]
