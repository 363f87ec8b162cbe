"""The sweep (Ray Tune + MLflow): the Ray job's driver (`python -m worker.tune.sweep`), the trainable,
Tune configuration, callbacks, tracking, trial checkpoints, outcomes and the summary. Importing this
package imports nothing (so `import worker.tune` does not shadow `ray.tune`)."""
