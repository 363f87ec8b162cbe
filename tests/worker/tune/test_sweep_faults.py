"""Fault tolerance on a real Ray cluster: a trial process killed mid-training is retried from its
checkpoint, continues its MLflow run, and ends exactly where an uninterrupted twin ends (CPU).

The fault is real: the test SIGKILLs the trial's worker process (its pid is on the run's tags) once
epoch 1 is checkpointed, i.e. once epoch 2 has logged its metrics (a trial reports epoch e with its
checkpoint before it trains epoch e + 1). Nothing in the production code knows about the test.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest
import torch
from mlflow import MlflowClient

from worker.contract.spec import JobSpec
from worker.contract.trial import TrainConfig
from worker.training.finetune import run_training
from worker.tune.settings import Settings
from worker.tune.sweep import run_sweep
from worker.tune.tuning import trial_configs

pytestmark = pytest.mark.glue


class Killer(threading.Thread):
    """Waits until the job's (only) trial has logged epoch `after` but not the last one, then SIGKILLs it."""

    def __init__(self, settings: Settings, job_id: str, after: int, epochs: int) -> None:
        super().__init__(daemon=True)
        self.settings, self.job_id, self.after, self.epochs = settings, job_id, after, epochs
        self.killed: dict[str, Any] = {}

    def run(self) -> None:
        client = MlflowClient(self.settings.tracking_uri)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not self.killed:
            experiment = client.get_experiment_by_name(self.settings.experiment)
            runs = client.search_runs(
                [experiment.experiment_id], f"tags.`smartune.job_id` = '{self.job_id}'"
            ) if experiment else []  # fmt: skip
            for run in runs:
                if "smartune.pid" not in run.data.tags:
                    continue
                steps = {m.step for m in client.get_metric_history(run.info.run_id, "score")}
                if steps and self.after <= max(steps) < self.epochs:
                    pid = int(run.data.tags["smartune.pid"])
                    os.kill(pid, signal.SIGKILL)
                    self.killed = {"pid": pid, "after_epoch": max(steps), "run_id": run.info.run_id}
            time.sleep(0.2)  # a poll costs about 8 ms of CPU (MLflow queries); an epoch takes seconds


@pytest.mark.parametrize("gpus", [0, 2], ids=["one-rank", "two-ranks"])
def test_killed_trial_resumes_from_checkpoint_and_matches_its_twin(
    ray_cluster: Any, sweep_settings: Settings, tiny_spec: Any, job_runs: Any, metric_history: Any, gpus: int
) -> None:
    """With 2 (logical) GPUs per trial the trial trains on 2 data-parallel ranks (gloo on this CPU machine):
    killing rank 0 ends its follower too, and the retry restarts both from the checkpoint."""
    epochs, job_id = 4, f"kill-{gpus}"
    document = tiny_spec(training={"epochs": epochs, "max_train_samples": 256},
                         resources={"cpus": 1, "gpus": gpus},
                         limits={"max_concurrent_trials": 1, "max_retries": 1})  # fmt: skip
    spec = JobSpec.model_validate(document)
    killer = Killer(sweep_settings, job_id, after=2, epochs=epochs)
    killer.start()
    summary = run_sweep(spec, job_id=job_id, settings=sweep_settings)
    killer.join(timeout=5)
    assert killer.killed, "the trial finished before it could be killed"

    assert summary["trials_by_state"]["TERMINATED"] == 1
    _, children = job_runs(job_id)
    assert len(children) == 1  # the retry continued the same MLflow run
    run = children[0]
    tags = run.data.tags
    assert run.info.run_id == killer.killed["run_id"] and run.info.status == "FINISHED"
    assert tags["smartune.starts"] == "2" and tags["smartune.failures"] == "1"
    assert tags["smartune.last_error_class"] == "infra" and tags["smartune.state"] == "TERMINATED"
    assert tags["smartune.prov.workers"] == str(max(1, gpus))
    resumed = int(tags["smartune.resumed_from_epoch"])
    assert 1 <= resumed <= killer.killed["after_epoch"]  # from its checkpoint, not from scratch
    assert int(tags["smartune.pid"]) != killer.killed["pid"]
    losses, accuracy = metric_history(run, "train_loss"), metric_history(run, "eval_accuracy")
    assert sorted(losses) == list(range(1, epochs + 1))

    # The uninterrupted twin: the same resolved configuration, trained straight through in this process.
    threads = torch.get_num_threads()
    try:
        twin = run_training(TrainConfig.from_dict(trial_configs(spec, spec.resources.cpus)[0]), None)
    finally:
        torch.set_num_threads(threads)
    assert [losses[e["epoch"]] for e in twin["epochs"]] == [e["train_loss"] for e in twin["epochs"]]
    assert [accuracy[e["epoch"]] for e in twin["epochs"]] == [
        e["metrics"]["accuracy"] for e in twin["epochs"]
    ]
    assert summary["best"]["value"] == twin["best"]["accuracy"]
