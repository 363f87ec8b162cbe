"""One fine-tuning run (torch + transformers, no Ray, no MLflow): data, models, the embedding adapter,
batching, metrics, the training session and loop, provenance. Importing this package imports nothing."""
