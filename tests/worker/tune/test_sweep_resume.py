"""A sweep survives its driver being SIGKILLed at any moment: before, during and right after a trial's
checkpoint is reported, and while Tune drops a superseded checkpoint (the window in which Tune's experiment
state on storage still names a checkpoint folder that is already gone). Every attempt is a real
`python -m worker.tune.sweep` process on the shared real Ray cluster; the moments are read off the Tune
storage folder from outside, so the production code knows nothing of the test. The last attempt must
end with every trial TERMINATED and each trial's MLflow run holding every epoch once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.worker.tune.test_sweep_entrypoint import ROOT, _env
from worker.tune.settings import Settings

pytestmark = [pytest.mark.glue, pytest.mark.slow]  # several driver processes: minutes

Snapshot = dict[str, set[str]]  # trial folder -> its checkpoint folder names
Moment = Callable[[Snapshot, Snapshot], bool]  # (first snapshot of the attempt, now) -> kill now?


def _snapshot(experiment: Path) -> Snapshot:
    out: Snapshot = {}
    try:
        for trial in experiment.glob("trial_*"):
            out[trial.name] = {c.name for c in trial.glob("checkpoint_*")}
    except FileNotFoundError:  # a folder deleted while listing
        pass
    return out


def _trial_started(start: Snapshot, now: Snapshot) -> bool:
    del start
    return bool(now)


def _checkpoint_appeared(start: Snapshot, now: Snapshot) -> bool:
    return any(names - start.get(trial, set()) for trial, names in now.items())


def _checkpoint_dropped(start: Snapshot, now: Snapshot) -> bool:
    return any(start[trial] - now.get(trial, set()) for trial in start)


MOMENTS: list[tuple[str, Moment, float]] = [  # (name, condition, extra delay in seconds)
    ("a trial started, no checkpoint yet", _trial_started, 0.0),
    ("a checkpoint folder just appeared (copy in flight)", _checkpoint_appeared, 0.0),
    ("right after a checkpoint was reported", _checkpoint_appeared, 0.3),
    ("a superseded checkpoint was just deleted", _checkpoint_dropped, 0.0),
    ("a checkpoint folder just appeared (copy in flight)", _checkpoint_appeared, 0.0),
    ("a superseded checkpoint was just deleted", _checkpoint_dropped, 0.0),
]


def _kill_when(driver: subprocess.Popen[bytes], experiment: Path, moment: Moment, delay: float) -> bool:
    """Polls the storage folder every few ms; SIGKILLs the driver at the moment. False if it ended first."""
    start = _snapshot(experiment)
    deadline = time.monotonic() + 300
    while driver.poll() is None and time.monotonic() < deadline:
        if moment(start, _snapshot(experiment)):
            time.sleep(delay)
            driver.send_signal(signal.SIGKILL)
            driver.wait(timeout=30)
            return True
        time.sleep(0.005)
    return False


def test_a_driver_killed_at_any_moment_loses_no_trial(
    ray_cluster: Any, sweep_settings: Settings, tiny_spec: Any, job_runs: Any, metric_history: Any
) -> None:
    import ray

    job_id, epochs = "resume-any", 4
    document = tiny_spec(training={"epochs": epochs, "max_train_samples": 128},
                         search_space={"axes": {"method": {"values": ["vanilla", "smart"]}}},
                         limits={"max_concurrent_trials": 2, "max_retries": 1})  # fmt: skip
    env = _env(sweep_settings.data_dir, SMARTUNE_JOB_SPEC=json.dumps(document),
               RAY_ADDRESS=ray.get_runtime_context().gcs_address)  # fmt: skip
    experiment = Path(sweep_settings.experiment_path(job_id))
    command = [sys.executable, "-m", "worker.tune.sweep", "--job-id", job_id, "--attempt"]

    killed: list[str] = []
    attempt = 0
    for name, moment, delay in MOMENTS:
        attempt += 1
        driver = subprocess.Popen([*command, str(attempt)], cwd=ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        if not _kill_when(driver, experiment, moment, delay):
            break  # the sweep ended before this moment came: nothing left to interrupt
        killed.append(f"attempt {attempt}: {name}")
    else:
        attempt += 1
        last = subprocess.run([*command, str(attempt)], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=600)  # fmt: skip
        assert last.returncode == 0, last.stderr[-4000:]
    assert len(killed) >= 4, f"too few kills to mean anything: {killed}"

    parent, children = job_runs(job_id)
    assert parent.info.status == "FINISHED", parent.data.tags.get("smartune.error")
    summary = json.loads(
        (Path(parent.info.artifact_uri.removeprefix("file://")) / "summary.json").read_text()
    )
    errors = {r.data.tags["smartune.trial_id"]: r.data.tags.get("smartune.error_message") for r in children}
    assert summary["trials_by_state"]["TERMINATED"] == 2, (killed, errors, summary["trials_by_state"])
    assert len(children) == 2
    for run in children:
        assert run.data.tags["smartune.state"] == "TERMINATED" and run.info.status == "FINISHED"
        assert sorted(metric_history(run, "score")) == list(range(1, epochs + 1))
