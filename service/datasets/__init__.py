"""Uploaded datasets (docs/datasets.md): upload and validation, the content-addressed store, the rows in the
job store, and pinning a job spec's `dataset:` reference to its digest.

May import the store and the plain helpers at the service's root; never the engine or the HTTP edge."""
