"""The dependency rule of docs/architecture.md, checked on the real import graph: every room, imported in a
fresh interpreter, loads only what it may, third-party packages' own imports included. Rooms are folders,
so a new module is covered by its folder. tests/test_boundaries.py checks the whole rule table statically
(unit tier); this checks what the interpreter really loads (a process per room, so the integration tier).

    cli ──────────────► service ──► worker.contract ──► smart_core.config
     │                                    ▲
     └──► worker.tune ──► worker.training ─┴──► smart_core ──► torch
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBRARIES = {"torch", "transformers", "ray", "mlflow", "fastapi", "sqlalchemy", "pydantic"}


def modules_of(folder: str) -> list[str]:
    """Every module of a room, as an importable dotted name."""
    base = ROOT / folder
    return sorted(
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for path in base.rglob("*.py")
    )


def loaded_after(statements: list[str]) -> set[str]:
    code = "import sys, json\n" + "\n".join(statements) + "\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=180, cwd=ROOT
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def _tops(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def _ours(modules: set[str]) -> set[str]:
    return {
        m
        for m in modules
        if m.split(".")[0] in ("smart_core", "worker", "service", "cli", "bench", "smartune", "research")
    }


def test_the_contract_is_plain_data() -> None:
    """worker.contract: pydantic and the method vocabulary (smart_core.config), nothing that computes."""
    loaded = loaded_after([f"import {m}" for m in modules_of("worker/contract")])
    assert not _tops(loaded) & (LIBRARIES - {"pydantic"})
    allowed = {"worker", "smart_core", "smart_core.config"}
    assert {m for m in _ours(loaded) if not m.startswith("worker.contract")} <= allowed


def test_the_service_reaches_the_worker_only_through_the_contract() -> None:
    loaded = loaded_after(["import service.main", "from service.main import create_app; create_app()",
                           *[f"import {m}" for m in modules_of("service") if "alembic" not in m]])  # fmt: skip
    assert not _tops(loaded) & {"torch", "transformers", "ray", "mlflow"}
    worker = {m for m in _ours(loaded) if m.split(".")[0] in ("worker", "smart_core")}
    assert {m for m in worker if not m.startswith("worker.contract")} <= {
        "worker",
        "smart_core",
        "smart_core.config",
    }
    assert not {m for m in _ours(loaded) if m.split(".")[0] == "cli"}


def test_training_runs_without_ray_mlflow_or_the_sweep() -> None:
    loaded = loaded_after([f"import {m}" for m in modules_of("worker/training")])
    assert not _tops(loaded) & {"ray", "mlflow", "fastapi", "sqlalchemy"}
    assert not {m for m in _ours(loaded) if m.startswith(("worker.tune", "service", "cli"))}


def test_the_tune_room_never_reaches_the_service_or_the_cli() -> None:
    loaded = loaded_after([f"import {m}" for m in modules_of("worker/tune")])
    assert not {m for m in _ours(loaded) if m.startswith(("service", "cli"))}


def test_the_integrations_load_their_libraries_and_the_core_only() -> None:
    """smart_core.integrations (the `hf` extra): transformers and accelerate beside torch; no worker, Ray or
    MLflow, so a Trainer or accelerate user installs the library, not the pool."""
    loaded = loaded_after([f"import {m}" for m in modules_of("smart_core/integrations")])
    assert _tops(loaded) & LIBRARIES <= {"torch", "transformers"}
    assert "accelerate" in _tops(loaded)
    assert {m.split(".")[0] for m in _ours(loaded)} == {"smart_core"}


@pytest.mark.parametrize(
    ("statement", "allowed"),
    [
        ("import smart_core; smart_core.Objective", {"torch", "smart_core"}),  # torch only
        ("import smart_core.config", {"smart_core"}),  # the method vocabulary needs no torch
        ("import worker", {"worker"}),  # worker/__init__ imports nothing
        ("import cli.main", {"cli", "smart_core"}),  # a thin shell (the method vocabulary for its flags)
    ],
)
def test_light_entry_points(statement: str, allowed: set[str]) -> None:
    loaded = loaded_after([statement])
    assert not _tops(loaded) & (LIBRARIES | {"service", "worker", "cli", "smart_core"}) - allowed, statement
    assert {m for m in _ours(loaded) if m.startswith("smart_core.")} <= {
        "smart_core.config"
    } or "torch" in allowed


def _foreign(modules: set[str]) -> set[str]:
    """Top-level packages that are neither the standard library nor always there (site's own hooks)."""
    return _tops(modules) - set(sys.stdlib_module_names) - _tops(loaded_after([]))


def test_the_sdk_needs_only_httpx() -> None:
    """`import smartune` (every module) loads the standard library only;
    a Client adds httpx and what httpx itself loads; PyYAML and pandas only when a spec file or a trials
    frame asks for them."""
    sdk = [f"import {m}" for m in modules_of("smartune")]
    assert _foreign(loaded_after(sdk)) == {"smartune"}
    httpx_alone = _foreign(loaded_after(["import httpx", "httpx.Client().close()"]))
    client = ["import smartune", "smartune.Client(url='http://127.0.0.1:9', key='smt_x').close()"]
    assert _foreign(loaded_after(client)) - httpx_alone == {"smartune"}


def test_a_sweep_driver_starts_without_the_modeling_stack() -> None:
    """`python -m worker.tune.sweep` (every Ray job's driver, and each of its attempts) tokenizes and describes
    models but loads one only at the end, to register the best: transformers' modeling stack (modeling_utils
    and what it drags in, torch._dynamo and DTensor among them) is imported there, not at start. It cost
    each driver about 2.5 s of CPU of its 9 s start on 2 cores (`python -X importtime -c "import
    worker.tune.sweep"`)."""
    loaded = loaded_after(["import worker.tune.sweep", "import worker.tune.audit"])
    assert "worker.tune.trainable" in loaded  # the trainable itself is imported: Tune pickles it
    heavy = {"transformers.modeling_utils", "transformers.core_model_loading", "torch._dynamo"}
    assert not heavy & loaded, sorted(heavy & loaded)
