"""Uploaded datasets (docs/datasets.md): upload and validation, the content-addressed store, the rows in the
job store, and pinning a job spec's `dataset:` reference to its digest."""
