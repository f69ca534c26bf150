"""Synthetic CME futures bars landed as Databento GLBX.MDP3 files (see ``generate``), with a
documented predictable component (a latent drift that pays after costs), a random-walk
control, and per-file sidecars from which ``oracle_summary`` reads what an oracle earned."""

from foxhunt_pipeline.synthetic.generate import dbn_file_name, generate, iter_days
from foxhunt_pipeline.synthetic.run_metadata import oracle_summary

__all__ = ["dbn_file_name", "generate", "iter_days", "oracle_summary"]
