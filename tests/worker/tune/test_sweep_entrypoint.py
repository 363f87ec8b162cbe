"""The Ray job entrypoint `python -m worker.tune.sweep`, run as the control plane runs it (a subprocess with
the spec in `SMARTUNE_JOB_SPEC` and the cluster in `RAY_ADDRESS`): invalid specs are refused before
Ray starts; a driver killed mid-sweep is resumed by the next attempt of the same job id.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from worker.tune.settings import Settings

pytestmark = pytest.mark.usefixtures("starts_processes")  # each test runs `python -m worker.tune.sweep`
ROOT = Path(__file__).resolve().parents[3]


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "SMARTUNE_STORAGE_PATH")}
    return {**env, "SMARTUNE_DATA_DIR": str(data_dir), **extra}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"task": "rte", "training": {"epochs": 0}}, "training.epochs"),
        ({"task": "nope"}, "task"),
        ({"task": "rte", "search_space": {"axes": {"learning_rate": {"type": "loguniform", "low": 0, "high": 1}}}},
         "search_space.axes.learning_rate"),
        ({"task": "rte", "model": "./no/such/model"}, "model"),
        ({"task": "rte", "data": "/no/such/glue"}, "data"),
    ],
)  # fmt: skip
def test_invalid_spec_exits_2_naming_the_field_before_ray_starts(
    spec: dict[str, Any], field: str, tmp_path: Path
) -> None:
    # RAY_ADDRESS points nowhere: had the driver tried to reach Ray it would fail differently (exit 1).
    env = _env(tmp_path, SMARTUNE_JOB_SPEC=json.dumps(spec), RAY_ADDRESS="127.0.0.1:1")
    done = subprocess.run(
        [sys.executable, "-m", "worker.tune.sweep", "--job-id", "bad", "--attempt", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert field in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""
    assert not (tmp_path / "ray_results").exists() and not (tmp_path / "mlflow.db").exists()


@pytest.mark.glue
def test_a_malformed_setting_exits_2_naming_it_before_ray_starts(glue_dir: Path, tmp_path: Path) -> None:
    spec = {"task": "rte", "model": "tiny-random", "data": str(glue_dir)}  # a valid spec: the setting is not
    env = _env(tmp_path, SMARTUNE_JOB_SPEC=json.dumps(spec), RAY_ADDRESS="127.0.0.1:1",
               SMARTUNE_UNPLACEABLE_TIMEOUT_S="soon")  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "worker.tune.sweep", "--job-id", "bad", "--attempt", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "SMARTUNE_UNPLACEABLE_TIMEOUT_S='soon'" in done.stderr and "Traceback" not in done.stderr


def _score_steps(settings: Settings, job_id: str) -> int:
    client = MlflowClient(settings.tracking_uri)
    experiment = client.get_experiment_by_name(settings.experiment)
    if experiment is None:
        return 0
    runs = client.search_runs([experiment.experiment_id], f"tags.`smartune.job_id` = '{job_id}'")
    steps = [m.step for r in runs for m in client.get_metric_history(r.info.run_id, "score")]
    return max(steps, default=0)


@pytest.mark.glue
@pytest.mark.slow  # a fault run: two driver processes (about 45 s here)
def test_next_attempt_resumes_a_killed_driver_over_ray_address(
    ray_cluster: Any, sweep_settings: Settings, tiny_spec: Any, job_runs: Any
) -> None:
    import ray

    document = tiny_spec(training={"epochs": 3, "max_train_samples": 256},
                         search_space={"axes": {"method": {"values": ["vanilla", "smart"]}}},
                         limits={"max_concurrent_trials": 1, "max_retries": 1})  # fmt: skip
    env = _env(sweep_settings.data_dir, SMARTUNE_JOB_SPEC=json.dumps(document),
               RAY_ADDRESS=ray.get_runtime_context().gcs_address)  # fmt: skip
    command = [sys.executable, "-m", "worker.tune.sweep", "--job-id", "entry-1", "--attempt"]

    first = subprocess.Popen(
        [*command, "1"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 240
    while (
        _score_steps(sweep_settings, "entry-1") < 2 and first.poll() is None and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    assert first.poll() is None, "attempt 1 ended before it could be killed"
    first.send_signal(signal.SIGKILL)  # the driver dies; Ray ends the trial it owned
    first.wait(timeout=30)

    second = subprocess.run([*command, "2"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert second.returncode == 0, second.stderr[-3000:]
    summary = json.loads(second.stdout.strip().splitlines()[-1])  # the last line of stdout
    assert summary["trials_by_state"]["TERMINATED"] == 2 and summary["job_id"] == "entry-1"

    parent, children = job_runs("entry-1")
    assert parent.info.status == "FINISHED" and parent.data.tags["smartune.attempt"] == "2"
    # The driver's process logs its start-up (imports, then ready: Ray and MLflow connected) per attempt.
    imported, ready = (parent.data.metrics[k] for k in ("driver_import_seconds", "driver_ready_seconds"))
    assert 0 < imported <= ready < 600
    assert summary["parent_run_id"] == parent.info.run_id
    assert len(children) == 2 and all(r.data.tags["smartune.state"] == "TERMINATED" for r in children)
    resumed = [r for r in children if r.data.tags["smartune.starts"] == "2"]
    assert len(resumed) == 1  # the interrupted trial continued its own run in attempt 2
    assert resumed[0].data.tags["smartune.attempt"] == "2"
    assert int(resumed[0].data.tags["smartune.resumed_from_epoch"]) >= 1
    # The resumed sweep registered its best trial's model; the summary (last line) says which version.
    registered = summary["registered_model"]  # no SMARTUNE_TEAM: the team `local`
    assert registered["name"] == "smartune-local-rte" and registered["run_id"] == summary["best"]["run_id"]
    client = MlflowClient(sweep_settings.tracking_uri)
    version = client.get_model_version("smartune-local-rte", registered["version"])
    assert version.run_id == summary["best"]["run_id"] and version.tags["smartune.job_id"] == "entry-1"
    assert all(r.data.tags["smartune.model_uri"].startswith("models:/") for r in children)
