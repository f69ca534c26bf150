"""Landed DBN files in, validated ``raw_bars`` parquet out.

``decode`` streams a file through ``databento.DBNStore`` (``dbn_file`` opens and checks it,
``records`` and ``symbols`` split outrights from spreads, ``batches`` builds Arrow batches,
``spill`` and ``background_writer`` keep memory bounded); ``landing`` says which files are
landed. No Dagster here: the ``raw_bars`` asset wires this to storage."""

from foxhunt_pipeline.ingest.dbn_file import DbnInputError, read_metadata
from foxhunt_pipeline.ingest.decode import IngestReport, ingest_dbn_file
from foxhunt_pipeline.ingest.landing import LANDED_SUFFIXES, landed_file_names, unregistered

__all__ = ["DbnInputError", "IngestReport", "LANDED_SUFFIXES", "ingest_dbn_file",
           "landed_file_names", "read_metadata", "unregistered"]
