"""The ``foxhunt`` command line (``commands``), the persistent Dagster instance it shares
with the UI (``instance``) and materialization from the shell (``runner``)."""
