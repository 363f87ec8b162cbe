"""Sweeps on a real local Ray cluster (2 CPUs, 2 logical GPUs) with a real MLflow SQLite store.

Every trial really trains (tiny-random on slices of real GLUE RTE); nothing is mocked.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from tests.worker.tune.test_pickled_paths import assert_only_pinned_paths
from worker.contract.spec import JobSpec
from worker.tune.settings import Settings
from worker.tune.sweep import run_sweep

pytestmark = pytest.mark.glue


def test_grid_sweep_records_parent_children_and_dedups_cells(
    ray_cluster: Any, sweep_settings: Settings, tiny_spec: Any, job_runs: Any, metric_history: Any
) -> None:
    # 2 methods x 2 epsilons x 2 lambda_s = 8 cells, but vanilla ignores both and lambda_s = 0 makes epsilon
    # irrelevant: 4 distinct trainings (vanilla; teacher only; SMART eps 1e-4; SMART eps 1e-3).
    document = tiny_spec(search_space={"axes": {"method": {"values": ["vanilla", "smart"]},
                                                 "epsilon": {"values": [1e-4, 1e-3]},
                                                 "lambda_s": {"values": [0.0, 1.0]}}})  # fmt: skip
    spec = JobSpec.model_validate(document)
    assert len(spec.trials()) == 4
    summary = run_sweep(spec, job_id="grid-4", settings=sweep_settings)

    assert summary["trials_by_state"] == {
        "PENDING": 0,
        "RUNNING": 0,
        "TERMINATED": 4,
        "ERROR": 0,
        "STOPPED": 0,
    }
    assert summary["main_metric"] == "accuracy" and summary["job_id"] == "grid-4"
    cells = {json.dumps(c["params"], sort_keys=True): c for c in summary["cells"]}
    assert set(cells) == {
        '{"epsilon": null, "lambda_s": null, "method": "vanilla"}',
        '{"epsilon": null, "lambda_s": 0.0, "method": "smart"}',
        '{"epsilon": 0.0001, "lambda_s": 1.0, "method": "smart"}',
        '{"epsilon": 0.001, "lambda_s": 1.0, "method": "smart"}',
    }
    assert all(c["n"] == 1 and c["std"] is None and 0 <= c["mean"] <= 1 for c in cells.values())

    assert_only_pinned_paths(Path(sweep_settings.experiment_path("grid-4")))  # what a resume unpickles
    parent, children = job_runs("grid-4")
    assert parent.info.run_id == summary["parent_run_id"] and parent.info.status == "FINISHED"
    assert parent.info.run_name == "grid-4"
    assert (
        parent.data.tags["smartune.spec_hash"] == spec.spec_hash()
        and parent.data.tags["smartune.attempt"] == "1"
    )
    client = MlflowClient(sweep_settings.tracking_uri)
    logged = json.loads(Path(client.download_artifacts(parent.info.run_id, "summary.json")).read_text())
    assert logged == json.loads(json.dumps(summary))
    assert parent.data.metrics["trials_terminated"] == 4

    assert len(children) == 4
    for run in children:
        tags, params = run.data.tags, run.data.params
        assert tags["mlflow.parentRunId"] == parent.info.run_id and run.info.status == "FINISHED"
        assert tags["smartune.state"] == "TERMINATED" and tags["smartune.job_id"] == "grid-4"
        assert json.loads(tags["smartune.cell"]) in [c["params"] for c in summary["cells"]]
        # One flat namespace, as in the spec's axes: the resolved method's fields beside the train fields.
        assert params["learning_rate"] == "0.001" and params["model"] == "tiny-random"
        assert params["method"] in ("vanilla", "smart") and "lambda_s" in params and "epsilon" in params
        assert (
            len(tags["smartune.prov.data_sha256"]) == 64
            and len(tags["smartune.prov.initial_model_sha256"]) == 64
        )
        assert "smartune.prov.torch_version" in tags and tags["smartune.prov.seed"] == "1"
        assert sorted(metric_history(run, "score")) == [1, 2]
        assert sorted(metric_history(run, "train_loss")) == [1, 2]
        files = {a.path for a in client.list_artifacts(run.info.run_id, "best_checkpoint")}
        assert {"best_checkpoint/model.safetensors", "best_checkpoint/config.json"} <= files
        assert tags["smartune.best_checkpoint"].endswith("/best_checkpoint")
        assert tags["smartune.model_uri"].startswith("models:/")  # the same checkpoint, transformers flavour
    smart = [r for r in children if json.loads(r.data.tags["smartune.cell"])["lambda_s"] == 1.0]
    assert all("train_r_s" in r.data.metrics and "train_d_breg" in r.data.metrics for r in smart)
    best = summary["best"]
    assert best["run_id"] in {r.info.run_id for r in children} and best["checkpoint_uri"].endswith(
        "best_checkpoint"
    )
    registered = summary["registered_model"]  # this job's version of the team's model of the task
    assert registered["name"] == "smartune-local-rte" and registered["run_id"] == best["run_id"]
    version = client.get_model_version("smartune-local-rte", registered["version"])
    assert version.run_id == best["run_id"] and version.tags["smartune.job_id"] == "grid-4"


def _diverging_glue(glue_dir: Path, folder: Path) -> Path:
    """A GLUE folder with the real RTE and an STS-B whose scores are 1e30: its squared error overflows
    fp32, so every step's loss is infinite (a real divergence, from the data rather than a hook)."""
    shutil.copytree(glue_dir / "RTE", folder / "RTE")
    (folder / "STS-B").mkdir(parents=True)
    for split in ("train", "dev"):
        rows = (glue_dir / "STS-B" / f"{split}.tsv").read_text().splitlines()[:65]
        blown = [rows[0]] + ["\t".join([*row.split("\t")[:-1], "1e30"]) for row in rows[1:]]
        (folder / "STS-B" / f"{split}.tsv").write_text("\n".join(blown) + "\n")
    return folder


def test_diverging_trial_fails_with_class_numerics_while_the_other_finishes(
    ray_cluster: Any, sweep_settings: Settings, tiny_spec: Any, job_runs: Any, glue_dir: Path, tmp_path: Path
) -> None:
    # Every STS-B step has an infinite loss: each is skipped (no NaN reaches the weights) and a whole
    # epoch of skips in a row fails the trial with class `numerics`; its retry (max_retries 1) fails at
    # once instead of training again. RTE trains normally.
    data = _diverging_glue(glue_dir, tmp_path / "glue")
    document = tiny_spec(method="vanilla", method_params={}, data=str(data), task=["rte", "stsb"],
                         limits={"max_concurrent_trials": 2, "max_retries": 1})  # fmt: skip
    summary = run_sweep(JobSpec.model_validate(document), job_id="nan-1", settings=sweep_settings)

    assert summary["trials_by_state"]["TERMINATED"] == 1 and summary["trials_by_state"]["ERROR"] == 1
    _, children = job_runs("nan-1")
    by_task = {r.data.params["task"]: r for r in children}
    failed, finished = by_task["stsb"], by_task["rte"]
    assert failed.info.status == "FAILED" and failed.data.tags["smartune.state"] == "ERROR"
    assert failed.data.tags["smartune.error_class"] == "numerics"
    assert "NumericsError" in failed.data.tags["smartune.error"]
    assert "non-finite loss or gradient" in failed.data.tags["smartune.error"]
    assert failed.data.tags["smartune.starts"] == "2"  # retried once, refused without training
    assert summary["errors"] == [{"trial_id": failed.data.tags["smartune.trial_id"], "run_id": failed.info.run_id,
                                  "error_class": "numerics", "error": failed.data.tags["smartune.error"]}]  # fmt: skip
    assert finished.info.status == "FINISHED" and finished.data.tags["smartune.state"] == "TERMINATED"
    assert summary["best"]["run_id"] == finished.info.run_id
    nan_cell = next(c for c in summary["cells"] if c["params"]["task"] == "stsb")
    assert nan_cell["n"] == 0 and nan_cell["mean"] is None


def test_fractional_gpu_request_reaches_tune_placement(
    ray_cluster: Any, sweep_settings: Settings, tiny_spec: Any, job_runs: Any, metric_history: Any
) -> None:
    assert ray_cluster.get("GPU", 0) >= 1  # logical GPUs of the session's cluster
    document = tiny_spec(training={"epochs": 1}, resources={"cpus": 1, "gpus": 0.5},
                         search_space={"axes": {"method": {"values": ["vanilla", "smart"]}}})  # fmt: skip
    summary = run_sweep(JobSpec.model_validate(document), job_id="gpu-half", settings=sweep_settings)

    assert summary["trials_by_state"]["TERMINATED"] == 2
    _, children = job_runs("gpu-half")
    for run in children:
        assert json.loads(run.data.tags["smartune.resources"]) == {"CPU": 1.0, "GPU": 0.5}
        assert len(json.loads(run.data.tags["smartune.gpu_ids"])) == 1  # Ray assigned a (logical) GPU
        assert run.data.tags["smartune.prov.device"] == "cpu"  # no CUDA here: the trial trains on CPU


def _keyword_task(folder: Path) -> None:
    """A real (if synthetic) sentiment task a tiny model learns in one epoch: the label is in a keyword."""
    import random

    rng = random.Random(0)
    good, bad = ["good", "great", "fine", "nice", "superb"], ["bad", "awful", "poor", "dull", "weak"]
    filler = "the a movie film plot acting was is very quite really rather story scene".split()
    folder.mkdir()
    for split, n in (("train", 512), ("dev", 64)):
        with (folder / f"{split}.jsonl").open("w") as f:
            for _ in range(n):
                label = rng.randint(0, 1)
                words = [rng.choice(filler) for _ in range(rng.randint(3, 8))]
                words.insert(rng.randint(0, len(words)), rng.choice(good if label else bad))
                f.write(json.dumps({"text": " ".join(words), "label": label}) + "\n")


def test_asha_stops_the_weak_trial_early(
    ray_cluster: Any, sweep_settings: Settings, tmp_path: Path, job_runs: Any, metric_history: Any
) -> None:
    _keyword_task(tmp_path / "keywords")
    document = {
        "task": "sst2",
        "data": str(tmp_path / "keywords"),
        "columns": {"sentence": "text", "label": "label"},
        "model": "tiny-random",
        "method": "vanilla",
        "training": {"epochs": 3, "batch_size": 16, "max_seq_length": 32},
        # Grid order = run order (one at a time): the learning trial sets the bar at epoch 1.
        "search_space": {"axes": {"learning_rate": {"values": [3e-3, 1e-7]}}},
        "search": {"asha": {"grace_period": 1, "reduction_factor": 2}},
        "resources": {"cpus": 1},
        "limits": {"max_concurrent_trials": 1},
    }
    summary = run_sweep(JobSpec.model_validate(document), job_id="asha-1", settings=sweep_settings)

    assert summary["trials_by_state"]["STOPPED"] == 1 and summary["trials_by_state"]["TERMINATED"] == 1
    _, children = job_runs("asha-1")
    by_lr = {r.data.params["learning_rate"]: r for r in children}
    stopped, full = by_lr["1e-07"], by_lr["0.003"]
    assert stopped.data.tags["smartune.state"] == "STOPPED" and stopped.info.status == "FINISHED"
    assert sorted(metric_history(stopped, "score")) == [1]  # one epoch of three
    assert sorted(metric_history(full, "score")) == [1, 2, 3]
    assert summary["best"]["run_id"] == full.info.run_id and summary["best"]["value"] > 0.9
