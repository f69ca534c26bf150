"""PyTorch models, training, evaluation and quantization. Knows nothing of Dagster."""
