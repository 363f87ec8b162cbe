"""Design §1: each package, imported in a fresh interpreter, loads only what it may."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = (
    "torch",
    "transformers",
    "ray",
    "mlflow",
    "fastapi",
    "sqlalchemy",
    "pydantic",
    "service",
    "worker",
    "cli",
)


def loaded_after(statement: str) -> set[str]:
    code = (
        f"import sys, json\n{statement}\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    ("statement", "allowed"),
    [
        ("import smart_core; smart_core.Objective", {"torch"}),  # torch only
        ("import smart_core.config", set()),  # the method vocabulary needs no torch
        ("import worker", set()),  # worker/__init__ imports nothing
        ("import worker.tasks", set()),  # the task registry is data
        ("import worker.spec", {"pydantic"}),  # the job contract: the service imports it, so no torch/ray
        ("import cli.main", set()),  # the CLI shell is thin: sides load per subcommand
        ("import worker.finetune", {"torch", "transformers", "worker"}),  # never service or cli
    ],
)
def test_import_boundaries(statement: str, allowed: set[str]) -> None:
    own = {"smart_core", "worker", "cli"} & set(statement.replace(";", " ").replace(".", " ").split())
    forbidden = set(HEAVY) - allowed - own
    assert not (loaded_after(statement) & forbidden), statement
