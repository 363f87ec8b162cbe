"""A multitask job through the real sweep path: real Ray, real MLflow store, tiny-random on real GLUE."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import mlflow.transformers
import pytest
from mlflow import MlflowClient

from worker.contract.spec import JobSpec
from worker.tune.settings import Settings
from worker.tune.sweep import run_sweep
from worker.tune.tracking import tracking_store

pytestmark = pytest.mark.glue


def test_multitask_trial_has_one_nested_run_per_task(
    ray_cluster: Any, sweep_settings: Settings, tiny_spec: Any, job_runs: Any, metric_history: Any
) -> None:
    document = tiny_spec(task=["rte", "stsb"], multitask={"sampling": "round-robin", "finetune_epochs": 1},
                         training={"max_train_samples": 16})  # fmt: skip
    spec = JobSpec.model_validate(document)
    summary = run_sweep(spec, job_id="multitask-2", settings=sweep_settings)

    assert summary["trials_by_state"]["TERMINATED"] == 1 and not summary["errors"]
    assert set(summary["tasks"]) == {"rte", "stsb"}
    for result in summary["tasks"].values():
        assert result["stage"] in ("joint", "finetune") and result["epoch"] >= 1
        assert math.isfinite(result["value"]) and abs(result["value"]) <= 1
    assert summary["best"]["tasks"].keys() == {"rte", "stsb"}
    assert summary["registered_model"]["version"] is None  # one model per task, registered per task:
    for task, result in summary["tasks"].items():
        registered = result["registered_model"]  # this job's version of the team's model of the task
        name = f"smartune-local-{task}"
        assert (
            registered["name"] == name and registered["uri"] == f"models:/{name}/{registered['version']}"
        ), registered
        with tracking_store(sweep_settings.tracking_uri):
            pipeline = mlflow.transformers.load_model(registered["uri"])  # the task's own head, its labels
        answer = pipeline("A man is playing a guitar.")[0]
        assert answer["label"] in (("entailment", "not_entailment") if task == "rte" else ("score",))

    parent, trials = job_runs("multitask-2")
    assert len(trials) == 1  # the nested task runs are not trials
    trial = trials[0]
    assert trial.data.params["task"] == "rte,stsb" and trial.data.params["finetune_epochs"] == "1"
    assert sorted(metric_history(trial, "best_score")) == [1, 2, 3, 4]  # 2 joint epochs + 2 fine-tunings
    client = MlflowClient(sweep_settings.tracking_uri)
    nested = client.search_runs(
        [parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{trial.info.run_id}'"
    )
    by_task = {r.data.tags["smartune.task"]: r for r in nested}
    assert set(by_task) == {"rte", "stsb"}
    for run in by_task.values():
        assert run.info.status == "FINISHED" and run.data.tags["smartune.kind"] == "task"
        assert "smartune.trial_id" not in run.data.tags
        assert sorted(metric_history(run, "mt_score")) == [1, 2]  # joint stage, step = joint epoch
        assert sorted(metric_history(run, "score")) == [1]  # fine-tuning, step = its epoch
        assert run.data.tags["smartune.best_stage"] in ("joint", "finetune")
        assert run.data.tags["smartune.model_uri"].startswith("models:/")  # its best checkpoint, as a model
        best = json.loads(
            Path(client.download_artifacts(run.info.run_id, "best_checkpoint/best.json")).read_text()
        )
        assert best["epoch"] == int(run.data.tags["smartune.best_epoch"])
    logged = json.loads(Path(client.download_artifacts(parent.info.run_id, "summary.json")).read_text())
    assert logged["tasks"].keys() == {"rte", "stsb"}
