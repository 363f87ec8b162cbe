"""The contract between the control plane and the worker: plain data, no torch, Ray or MLflow.

The job spec and spec files, grid expansion and presets, the task registry, the trial's fields declared
once (`trial`), MLflow tag names and trial states (`tags`), error classes, and the one rule for "local
path or hub id" with the model aliases (`sources`), the node types an autoscaler may add (`node_types`).
The service imports the worker only from here.
Importing this package imports nothing.
"""
