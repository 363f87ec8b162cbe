"""A newcomer's first minutes against a real `smartune serve` (issue 31), with no Ray head: the serve
banner names the dashboard and the admin key, `/` is the dashboard, the spec's JSON Schema is served, the
CLI's exit codes tell a refusal from a missing job from an unreachable server, and a misplaced spec field
is answered with the field meant."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from cli.exit_codes import ExitCode
from tests.integration.client import tiny_spec
from tests.support.cluster import Server, free_port, make_server
from worker.contract.spec_doc import jobspec_schema

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def rayless(tmp_path: Path) -> Iterator[Server]:
    """The API alone: its Ray address answers nothing, which none of these calls needs."""
    server = make_server(tmp_path, ray_address=f"http://127.0.0.1:{free_port()}").start()
    yield server
    server.stop()


def _cli(server: Server, key: str, *argv: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SMARTUNE_URL": url or server.url, "SMARTUNE_API_KEY": key}
    env.pop("SMARTUNE_API_KEY_FILE", None)
    return subprocess.run([sys.executable, "-m", "cli", *argv], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=60)  # fmt: skip


def test_a_newcomers_first_minutes(rayless: Server, tmp_path: Path) -> None:
    out = rayless.output()
    assert f"dashboard at {rayless.url}/ui/jobs" in out and f"{rayless.data_dir / 'admin-key'}" in out
    home = httpx.get(f"{rayless.url}/", follow_redirects=False, timeout=10)
    assert home.status_code == 307 and home.headers["location"] == "/ui/jobs"
    assert httpx.get(f"{rayless.url}/api/v1/schema/jobspec", timeout=10).json() == jobspec_schema()

    admin = rayless.admin_key()
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec(training={"epochs": 1, "epsilon": 1e-4})))
    refused = _cli(rayless, admin, "submit", str(spec))  # the admin key belongs to no team
    assert refused.returncode == ExitCode.UNAUTHORISED, refused.stderr
    made = subprocess.run([sys.executable, "-m", "cli", "admin", "--data-dir", str(rayless.data_dir),
                           "create-team", "nlp", "--gpus", "1"], capture_output=True, text=True,
                          env=rayless.env, cwd=ROOT, timeout=60)  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "warning" in made.stderr  # the pool was never read here: its size is unknown
    team = made.stdout.strip()
    hinted = _cli(rayless, team, "submit", str(spec))
    assert hinted.returncode == ExitCode.REJECTED and "did you mean `method_params.epsilon`?" in hinted.stderr
    assert _cli(rayless, team, "status", "job-nope").returncode == ExitCode.NOT_FOUND
    gone = _cli(rayless, team, "jobs", url=f"http://127.0.0.1:{free_port()}")
    assert gone.returncode == ExitCode.UNREACHABLE and "cannot reach the server" in gone.stderr
