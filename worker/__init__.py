"""The worker: what runs on the Ray cluster, in three rooms (docs/architecture.md §1).

`worker.contract` is the plain-data contract the control plane shares; `worker.training` fine-tunes one
model; `worker.tune` runs a sweep. Importing this package imports nothing.
"""
