"""Synthetic CME futures bars landed as Databento GLBX.MDP3 files (see ``generate``), with a
documented predictable component and a random-walk control."""

from foxhunt_pipeline.synthetic.generate import dbn_file_name, generate, iter_days

__all__ = ["dbn_file_name", "generate", "iter_days"]
