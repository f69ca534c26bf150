"""foxhunt-pipeline: Databento DBN futures bars to trained, evaluated, quantized models."""

__version__ = "0.1.0"
