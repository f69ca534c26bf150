"""Where durable state lives: the local warehouse (``warehouse``), the same API on an
object store (``object_store``), run and dataset versions (``artifact_sync``,
``model_store``, ``dataset_store``). Every local write goes through
``foxhunt_pipeline.basics.atomic.atomic_write``."""
