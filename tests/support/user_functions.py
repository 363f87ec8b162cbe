"""Small custom functions for tests/worker/tune/test_function_process.py, importable in the function's child
process as `tests.support.user_functions:<name>` (the repository is on its `sys.path`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

# What a function could steal from the worker node's environment (the test sets fake values for them).
SECRET_NAMES = ("RAY_AUTH_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "MLFLOW_TRACKING_PASSWORD")
# What it needs to see.
NEEDED_NAMES = ("PYTHONPATH", "SMARTUNE_DATA_ROOTS")


def two_epochs(config: dict[str, Any], reporter: Any, data_roots: list[Path]) -> None:
    print(f"epochs for seed {config['seed']}")  # reaches the trial's stdout through the parent
    for epoch in range(2):
        folder = Path(config["folder"]) / f"epoch-{epoch + 1}"
        folder.mkdir()
        reporter.report({"accuracy": 0.5 + epoch / 10, "loss": 1.0 - epoch / 10}, checkpoint_dir=folder)
    print(f"roots {[str(r) for r in data_roots]}", file=sys.stderr)


def raises(config: dict[str, Any], reporter: Any, data_roots: list[Path]) -> None:
    reporter.report({"accuracy": 0.5})
    raise ValueError(f"features must be at least 1, got {config.get('features', 0)}")


def exits(config: dict[str, Any], reporter: Any, data_roots: list[Path]) -> None:
    reporter.report({"accuracy": 0.5})
    os._exit(3)  # no last message: the trial says how its process ended


def lacks_the_metric(config: dict[str, Any], reporter: Any, data_roots: list[Path]) -> None:
    try:
        reporter.report({"loss": 1.0})  # the trial refuses it: raised here, in the function
    except ValueError as err:
        print(f"refused: {err}")
    reporter.report({"accuracy": 0.25})


def out_of_memory(config: dict[str, Any], reporter: Any, data_roots: list[Path]) -> None:
    raise MemoryError


def environment(config: dict[str, Any], reporter: Any, data_roots: list[Path]) -> None:
    """Reports, as 0/1 metrics, which of the secret and needed names its process can see."""
    seen = {f"sees_{name}": float(name in os.environ) for name in SECRET_NAMES + NEEDED_NAMES}
    reporter.report({"accuracy": 1.0} | seen)
