"""`smartune sweep` run twice on one spec: the second run says loudly that it resumes the first one's
experiment (whose trials keep their results and do not run again); `--fresh` starts a new experiment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.worker.tune.test_sweep_entrypoint import ROOT, _env
from worker.tune.settings import Settings

pytestmark = pytest.mark.glue


def _sweep(spec: Path, settings: Settings, ray_address: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = _env(settings.data_dir, RAY_ADDRESS=ray_address)
    cmd = [sys.executable, "-m", "cli.main", "sweep", str(spec), *extra]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)


def test_a_rerun_says_it_resumes_and_fresh_starts_anew(
    ray_cluster: Any, sweep_settings: Settings, tiny_spec: Any, tmp_path: Path
) -> None:
    import ray

    address = ray.get_runtime_context().gcs_address
    spec = tmp_path / "rerun.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec(name="rerun-check", method="vanilla", method_params={},
                                             training={"epochs": 1}, seeds=[1])))  # fmt: skip
    first = _sweep(spec, sweep_settings, address)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "RESUMING" not in first.stderr
    summary = json.loads(first.stdout.strip().splitlines()[-1])

    again = _sweep(spec, sweep_settings, address)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "this spec ran before" in again.stderr and "--fresh" in again.stderr
    assert json.loads(again.stdout.strip().splitlines()[-1])["job_id"] == summary["job_id"]

    fresh = _sweep(spec, sweep_settings, address, "--fresh")
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert "RESUMING" not in fresh.stderr
    renewed = json.loads(fresh.stdout.strip().splitlines()[-1])
    assert renewed["job_id"].startswith(summary["job_id"] + "-") and renewed["job_id"] != summary["job_id"]
