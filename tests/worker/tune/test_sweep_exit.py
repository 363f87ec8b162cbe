"""The Ray job's exit code tells the control plane whether the sweep produced anything: a sweep whose every
trial failed exits 3 (its summary still the last line of stdout, the reason on stderr), not 0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.worker.tune.test_sweep import _diverging_glue
from tests.worker.tune.test_sweep_entrypoint import ROOT, _env
from worker.tune.settings import Settings
from worker.tune.sweep import NO_RESULT

pytestmark = pytest.mark.glue


def test_a_sweep_with_no_completed_trial_exits_3_with_its_reason(
    ray_cluster: Any, sweep_settings: Settings, tiny_spec: Any, glue_dir: Path, tmp_path: Path
) -> None:
    import ray

    data = _diverging_glue(glue_dir, tmp_path / "glue")
    document = tiny_spec(method="vanilla", method_params={}, data=str(data), task="stsb",
                         limits={"max_concurrent_trials": 1, "max_retries": 0})  # fmt: skip
    env = _env(sweep_settings.data_dir, SMARTUNE_JOB_SPEC=json.dumps(document),
               RAY_ADDRESS=ray.get_runtime_context().gcs_address)  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "worker.tune.sweep", "--job-id", "no-result", "--attempt", "1"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)  # fmt: skip
    assert done.returncode == NO_RESULT, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["trials_by_state"]["ERROR"] == 1 and summary["trials_by_state"]["TERMINATED"] == 0
    assert "no trial completed (1 ERROR)" in done.stderr
