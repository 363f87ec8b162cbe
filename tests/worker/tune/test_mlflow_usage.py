"""MLflow as its users use it: each trial's model in the transformers flavour, the sweep's best as a version of
the team's registered model of the task (alias `best`), the training data as a dataset input with its
digest, system metrics.

One real sweep (tiny-random on a slice of real RTE, 2 trials, on the session's Ray cluster and MLflow
store) is read back by several tests; the regression flavour and the registry's failure path run without Ray.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from mlflow import MlflowClient
from mlflow.entities import Run

from worker.contract.model_registry import registered_model_name
from worker.contract.spec import JobSpec
from worker.contract.tags import BEST_CHECKPOINT, BEST_EPOCH, JOB, MODEL_URI, TRIAL
from worker.contract.tasks import get_task
from worker.contract.trial import TrainConfig
from worker.training.models import REGRESSION_LABEL, resolve_model, set_label_names
from worker.tune.registration import register_best
from worker.tune.settings import Settings
from worker.tune.sweep import run_sweep
from worker.tune.telemetry import (
    DIGEST_LENGTH,
    INTERVAL_ENV,
    examples_sha256,
    log_training_data,
    system_metrics_interval,
    train_examples,
)
from worker.tune.tracking import tracking_store

JOB_ID = "mlflow-usage"
TEAM = "usage"  # its own team: the session's other sweeps add versions to the team `local`'s models
RTE_PAIRS = [
    {"text": "A man is sleeping on the couch.", "text_pair": "Someone is resting."},
    {"text": "The museum opened in 1850.", "text_pair": "The museum is closed forever."},
]


@pytest.fixture(scope="module")
def swept(ray_cluster: Any, sweep_settings: Settings, glue_dir: Path) -> Iterator[dict[str, Any]]:
    """The sweep's summary. System metrics every second, so the monitor's own thread logs some too."""
    document = {
        "task": "rte",
        "data": str(glue_dir),
        "model": "tiny-random",
        "method": "vanilla",
        "training": {"epochs": 2, "batch_size": 8, "max_train_samples": 32, "max_eval_samples": 16,
                     "max_seq_length": 64},
        "search_space": {"axes": {"learning_rate": {"values": [1e-3, 3e-3]}}},
        "resources": {"cpus": 1},
        "limits": {"max_concurrent_trials": 1},
    }  # fmt: skip
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(INTERVAL_ENV, "1")
        settings = replace(sweep_settings, team=TEAM)
        yield run_sweep(JobSpec.model_validate(document), job_id=JOB_ID, settings=settings)


def _children(job_runs: Any) -> list[Run]:
    _, children = job_runs(JOB_ID)
    assert len(children) == 2
    return children


@pytest.mark.glue
def test_each_trial_logs_its_best_checkpoint_as_a_transformers_pipeline_with_rte_labels(
    swept: dict[str, Any], sweep_settings: Settings, job_runs: Any
) -> None:
    import mlflow.transformers

    assert swept["trials_by_state"]["TERMINATED"] == 2
    client = MlflowClient(sweep_settings.tracking_uri)
    for run in _children(job_runs):
        uri = run.data.tags[MODEL_URI]
        assert uri.startswith("models:/m-") and "smartune.model_error" not in run.data.tags
        logged = client.get_logged_model(uri.removeprefix("models:/"))
        assert logged.source_run_id == run.info.run_id and str(logged.status) == "READY"
        assert logged.experiment_id == run.info.experiment_id and logged.name == "model"
        assert logged.tags[TRIAL] == run.data.tags[TRIAL] and logged.tags[JOB] == JOB_ID
        # Linked to the run at its best epoch, whose metrics it carries.
        outputs = client.get_run(run.info.run_id).outputs.model_outputs
        assert [(o.model_id, o.step) for o in outputs] == [(logged.model_id, int(run.data.tags[BEST_EPOCH]))]
        assert {m.key for m in logged.metrics} >= {"score", "eval_accuracy"}
        # The plain checkpoint folder stays (the service and older readers use it), now with label names.
        config = json.loads(
            Path(client.download_artifacts(run.info.run_id, f"{BEST_CHECKPOINT}/config.json")).read_text()
        )
        assert config["id2label"] == {"0": "entailment", "1": "not_entailment"}

    best_run = client.get_run(swept["best"]["run_id"])
    with tracking_store(sweep_settings.tracking_uri):
        pipeline = mlflow.transformers.load_model(best_run.data.tags[MODEL_URI])
    assert type(pipeline).__name__ == "TextClassificationPipeline"
    predictions = pipeline(RTE_PAIRS)
    assert len(predictions) == 2
    assert {p["label"] for p in predictions} <= set(get_task("rte").labels or ())
    assert all(0.0 <= p["score"] <= 1.0 for p in predictions)


@pytest.mark.glue
def test_the_best_trials_model_is_the_teams_version_with_the_alias_best(
    swept: dict[str, Any], sweep_settings: Settings, job_runs: Any
) -> None:
    import mlflow.transformers

    registered = swept["registered_model"]
    name = registered_model_name(TEAM, "rte")
    assert registered["name"] == name == "smartune-usage-rte" and registered["alias"] == "best"
    assert "error" not in registered and registered["version"] == "1" and registered["alias_moved"] is True
    assert registered["uri"] == f"models:/{name}/1" and registered["best_uri"] == f"models:/{name}@best"
    assert (
        registered["run_id"] == swept["best"]["run_id"]
        and registered["trial_id"] == swept["best"]["trial_id"]
    )

    client = MlflowClient(sweep_settings.tracking_uri)
    version = client.get_model_version_by_alias(name, "best")
    assert str(version.version) == registered["version"] and version.run_id == swept["best"]["run_id"]
    best_run = client.get_run(swept["best"]["run_id"])
    assert version.source == best_run.data.tags[MODEL_URI] == registered["model_uri"]  # the logged model
    assert version.tags[JOB] == JOB_ID and version.tags["smartune.max_eval_samples"] == "16"
    assert float(version.tags["smartune.dev_score"]) == pytest.approx(swept["best"]["value"])
    assert client.get_registered_model(name).tags == {"smartune.team": TEAM, "smartune.task": "rte"}

    parent, _ = job_runs(JOB_ID)
    assert parent.data.tags["smartune.registered_model"] == name
    assert parent.data.tags["smartune.registered_version"] == registered["version"]
    logged = json.loads(Path(client.download_artifacts(parent.info.run_id, "summary.json")).read_text())
    assert logged["registered_model"] == registered

    with tracking_store(sweep_settings.tracking_uri):
        pipeline = mlflow.transformers.load_model(registered["best_uri"])  # what a user of the registry loads
    assert {p["label"] for p in pipeline(RTE_PAIRS)} <= {"entailment", "not_entailment"}


@pytest.mark.glue
def test_the_training_data_is_a_dataset_input_with_the_digest_of_the_examples_trained_on(
    swept: dict[str, Any], job_runs: Any, glue_dir: Path
) -> None:
    task = get_task("rte")
    for run in _children(job_runs):
        inputs = run.inputs.dataset_inputs
        assert len(inputs) == 1
        dataset, tags = inputs[0].dataset, {t.key: t.value for t in inputs[0].tags}
        config = TrainConfig.from_dict({"task": "rte", "data": str(glue_dir), "model": "tiny-random",
                                        "max_train_samples": 32})  # fmt: skip
        sha256 = examples_sha256(task, "train", train_examples(config, task))
        assert dataset.name == "rte-train" and dataset.digest == sha256[:DIGEST_LENGTH]
        assert tags["mlflow.data.context"] == "training" and tags["smartune.sha256"] == sha256
        assert json.loads(dataset.profile)["num_rows"] == 32
        assert json.loads(dataset.source)["uri"] == str(glue_dir / "RTE" / "train.tsv")
        columns = {c["name"] for c in json.loads(dataset.schema)["mlflow_colspec"]}
        assert columns == {"sentence1", "sentence2", "label"}


@pytest.mark.glue
def test_trial_runs_carry_system_metrics(swept: dict[str, Any], job_runs: Any, metric_history: Any) -> None:
    for run in _children(job_runs):
        system = {k for k in run.data.metrics if k.startswith("system/")}
        assert {"system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"} <= system
        assert len(metric_history(run, "system/cpu_utilization_percentage")) >= 1


@pytest.mark.glue
def test_trial_runs_carry_their_start_up(swept: dict[str, Any], job_runs: Any) -> None:
    """The first trial of a process logs its process's age when Tune first called it (Ray's start of the
    process and the trainable's imports: worker.tune.startup_clock) at step 0, beside `setup_seconds`."""
    children = _children(job_runs)
    assert all(run.data.metrics["setup_seconds"] > 0 for run in children)
    # Two trials at once on the session's cluster: each starts its own process, or one reuses the other's.
    ages = [
        r.data.metrics["worker_start_seconds"] for r in children if "worker_start_seconds" in r.data.metrics
    ]
    assert ages and all(0 < age < 600 for age in ages)


@pytest.mark.glue
def test_the_digest_follows_the_selection_of_examples(glue_dir: Path) -> None:
    task = get_task("rte")

    def digest(**fields: Any) -> str:
        config = TrainConfig.from_dict(
            {"task": "rte", "data": str(glue_dir), "model": "tiny-random", **fields}
        )
        return examples_sha256(task, "train", train_examples(config, task))

    assert digest(max_train_samples=32) == digest(max_train_samples=32, learning_rate=1e-3)
    assert digest(max_train_samples=32) != digest(max_train_samples=16)
    assert digest(max_train_samples=64, train_fraction=0.5) != digest(max_train_samples=64)
    assert system_metrics_interval({}) == 15.0 and system_metrics_interval({INTERVAL_ENV: "0"}) == 0.0
    assert system_metrics_interval({INTERVAL_ENV: "soon"}) == 15.0


def _store(tmp_path: Path, uri: str) -> tuple[MlflowClient, str]:
    client = MlflowClient(uri)
    return client, client.create_experiment("e", artifact_location=(tmp_path / "artifacts").as_uri())


def test_a_regression_best_trial_without_a_model_is_logged_and_registered_answering_a_score(
    tmp_path: Path, mlflow_uri: str
) -> None:
    # STS-B: one output, problem_type "regression": the pipeline applies no function and names it `score`.
    # The run has its best checkpoint but no logged model (a trial stopped early): the driver logs it first.
    import mlflow.transformers

    client, experiment = _store(tmp_path, mlflow_uri)
    model, tokenizer = resolve_model(
        "tiny-random", num_labels=1, is_regression=True, head_dropout=0.1, seed=1
    )
    set_label_names(model.config, get_task("stsb").labels)
    model.save_pretrained(tmp_path / "checkpoint")
    tokenizer.save_pretrained(tmp_path / "checkpoint")
    run = client.create_run(experiment, tags={JOB: "j", TRIAL: "t", BEST_EPOCH: "1"})
    client.log_artifacts(run.info.run_id, str(tmp_path / "checkpoint"), BEST_CHECKPOINT)

    best = {"run_id": run.info.run_id, "trial_id": "t", "value": 0.5}
    registered = register_best(client, team="nlp", task="stsb", job_id="job-r", spec_hash="h", best=best,
                               main_metric="pearson")  # fmt: skip
    assert registered["version"] == "1" and "error" not in registered
    uri = client.get_run(run.info.run_id).data.tags[MODEL_URI]
    assert registered["model_uri"] == uri
    # Registering again (a later attempt with the same best) reuses the version.
    again = register_best(client, team="nlp", task="stsb", job_id="job-r", spec_hash="h", best=best,
                          main_metric="pearson")  # fmt: skip
    assert again["version"] == "1"
    assert len(client.search_model_versions("name = 'smartune-nlp-stsb'")) == 1
    with tracking_store(client.tracking_uri):
        pipeline = mlflow.transformers.load_model(registered["uri"])
        flavor = mlflow.models.get_model_info(uri).flavors["transformers"]
    assert flavor["task"] == "text-classification"
    [prediction] = pipeline([RTE_PAIRS[0]])
    assert prediction["label"] == REGRESSION_LABEL and isinstance(prediction["score"], float)
    with torch.no_grad():
        inputs = tokenizer(RTE_PAIRS[0]["text"], RTE_PAIRS[0]["text_pair"], return_tensors="pt")
        raw = model.eval()(**inputs).logits.item()
    assert prediction["score"] == pytest.approx(raw, abs=1e-5)  # the raw prediction, no sigmoid


@pytest.mark.glue
def test_a_dataset_row_made_meanwhile_by_another_trial_is_retried_not_lost(
    tmp_path: Path, mlflow_uri: str, glue_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two trials log the same training data at once: MLflow's get-or-create of the dataset row races, and
    the loser's insert fails ("UNIQUE constraint failed: datasets..." on SQLite). The input is logged on
    the next try, not dropped with a warning. The lost race is made to happen once, before the real call."""
    client, experiment = _store(tmp_path, mlflow_uri)
    run_id = client.create_run(experiment).info.run_id
    real = client.log_inputs
    calls: list[int] = []

    def racing(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("(sqlite3.IntegrityError) UNIQUE constraint failed: datasets.experiment_id")
        real(*args, **kwargs)

    monkeypatch.setattr(client, "log_inputs", racing)
    config = TrainConfig.from_dict({"task": "rte", "data": str(glue_dir), "model": "tiny-random",
                                    "max_train_samples": 16})  # fmt: skip
    log_training_data(client, run_id, config, get_task("rte"))
    assert len(calls) == 2
    assert [d.dataset.name for d in client.get_run(run_id).inputs.dataset_inputs] == ["rte-train"]
