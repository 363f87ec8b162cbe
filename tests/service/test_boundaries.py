"""Design §1 for the control plane: importing it (and building the app) loads no torch, transformers,
smart_core beyond its config vocabulary, worker module beyond the spec, nor Ray or MLflow."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def loaded_after(code: str) -> set[str]:
    script = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


ALLOWED_OURS = {
    "worker",
    "worker.spec",
    "worker.grid",
    "worker.presets",
    "worker.tasks",
    "worker.config",
    "smart_core",
    "smart_core.config",
}


@pytest.mark.parametrize(
    "code",
    [
        "import service.main",
        "from service.main import create_app; create_app()",
        "import cli.serve_cmd, cli.client_cmd, cli.admin_cmd",
    ],
)
def test_the_service_stays_light(code: str) -> None:
    modules = loaded_after(code)
    tops = {m.split(".")[0] for m in modules}
    assert not tops & {"torch", "transformers", "ray", "mlflow"}, code
    ours = {m for m in modules if m.split(".")[0] in ("worker", "smart_core")}
    assert ours <= ALLOWED_OURS, ours - ALLOWED_OURS
