"""Where durable state lives: the local warehouse (``warehouse``), the same API on an
object store (``object_store``), run and dataset versions (``artifact_sync``,
``model_store``, ``dataset_store``). Every local write goes through
``models.atomic.atomic_write``."""
