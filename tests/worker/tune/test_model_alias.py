"""One registered model per team and task: versions collected across jobs, `best` moved only by a better
dev score on the same dev rows. The rule alone (pure), then `register_best` on a real local MLflow store
(SQLite, in process) with trial runs as the sweep leaves them: params, `best_score`, a logged model."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from worker.contract.model_registry import (
    ALIAS_NOTE,
    DEV_SCORE,
    EVAL_ROWS,
    MAX_EVAL_SAMPLES,
    TASK_TAG,
    TEAM_TAG,
    registered_model_name,
)
from worker.contract.tags import JOB, MODEL_URI, PARENT, SPEC_HASH, TRIAL
from worker.tune.job_models import task_bests
from worker.tune.model_alias import Scored, decide, eval_rows_digest
from worker.tune.registration import register_best
from worker.tune.summary import TrialOutcome

RTE = {"task": "rte", "data": "None", "columns": "None", "max_eval_samples": "64", "sampling": "random",
       "fraction_seed": "13", "learning_rate": "2e-05"}  # fmt: skip


def test_names_are_per_team_and_task() -> None:
    assert registered_model_name("nlp", "rte") == "smartune-nlp-rte"
    assert registered_model_name("a.b_c", "anli_r1") == "smartune-a.b_c-anli_r1"
    assert registered_model_name("nlp", "my task/1") == "smartune-nlp-my-task-1"


def test_the_dev_rows_digest_follows_only_what_picks_the_rows() -> None:
    base = eval_rows_digest(RTE, "rte", "accuracy")
    assert base == eval_rows_digest(RTE | {"learning_rate": "1e-3", "seed": "7"}, "rte", "accuracy")
    for changed in ({"max_eval_samples": "32"}, {"fraction_seed": "14"}, {"sampling": "head"},
                    {"data": "/data/rte"}, {"columns": '{"sentence1": "premise"}'}):  # fmt: skip
        assert eval_rows_digest(RTE | changed, "rte", "accuracy") != base, changed
    assert eval_rows_digest(RTE, "mrpc", "accuracy") != base
    assert eval_rows_digest(RTE, "rte", "f1") != base
    every_row = RTE | {"max_eval_samples": "None"}
    # Every row kept: the sample's settings do not matter; a `head` sample has no seed.
    assert eval_rows_digest(every_row | {"sampling": "head", "fraction_seed": "1"}, "rte", "accuracy") == (
        eval_rows_digest(every_row, "rte", "accuracy")
    )
    head = RTE | {"sampling": "head"}
    assert eval_rows_digest(head | {"fraction_seed": "99"}, "rte", "accuracy") == (
        eval_rows_digest(head, "rte", "accuracy")
    )


def test_best_moves_only_to_a_strictly_better_score_on_the_same_rows() -> None:
    new = Scored("3", 0.71, "rows-a")
    assert decide(new, None, "accuracy") == (
        True,
        "took best: the first scored version (dev accuracy 0.7100)",
    )
    moved, note = decide(new, Scored("2", 0.70, "rows-a"), "accuracy")
    assert moved and note == "took best from version 2: dev accuracy 0.7100 > 0.7000"
    moved, note = decide(new, Scored("2", 0.71, "rows-a"), "accuracy")
    assert not moved and note == "best stays at version 2: dev accuracy 0.7100 does not beat 0.7100"
    moved, note = decide(new, Scored("2", 0.90, "rows-a"), "accuracy")
    assert not moved and "does not beat 0.9000" in note
    moved, note = decide(new, Scored("2", 0.10, "rows-b"), "accuracy")
    assert not moved and note.startswith("not comparable: scored on other dev rows than version 2")
    moved, note = decide(new, Scored("1", 0.10, None), "accuracy")  # registered before the rule
    assert not moved and note.startswith("not compared: version 1 (best) records no dev set digest")
    assert decide(Scored("3", None, "rows-a"), None, "accuracy")[0] is False
    assert decide(Scored("3", math.nan, "rows-a"), None, "accuracy")[0] is False
    assert decide(new, Scored("3", 0.71, "rows-a"), "accuracy")[0] is True  # a rerun: best already


def _outcome(
    trial: str, value: float | None, seed: int, task: str | None = None, state: Any = "TERMINATED"
) -> TrialOutcome:
    cell = {"task": task} if task else {}
    return TrialOutcome(trial, state, cell, seed, value, run_id=f"run-{trial}")


def test_each_task_of_a_task_axis_keeps_its_own_best_trial() -> None:
    outcomes = [_outcome("t1", 0.6, 1, "rte"), _outcome("t2", 0.7, 2, "rte"), _outcome("t3", 0.7, 1, "rte"),
                _outcome("t4", 0.9, 1, "mrpc"), _outcome("t5", 0.99, 1, "mrpc", state="ERROR"),
                _outcome("t6", None, 1, "stsb"), _outcome("t7", math.inf, 1, "stsb")]  # fmt: skip
    bests = task_bests(outcomes, "rte")
    assert {task: o.trial_id for task, o in bests.items()} == {"rte": "t3", "mrpc": "t4"}  # tie: lower seed
    assert task_bests([_outcome("t1", 0.5, 1)], "sst2")["sst2"].trial_id == "t1"


def _trial_run(client: MlflowClient, experiment: str, job: str, score: float, **params: str) -> str:
    """A finished trial's run as the sweep leaves it: params, `best_score`, a logged model named by MODEL_URI."""
    run = client.create_run(experiment, tags={JOB: job, TRIAL: "t1"})
    run_id = run.info.run_id
    for key, value in (RTE | params).items():
        client.log_param(run_id, key, value)
    client.log_metric(run_id, "best_score", score)
    model = client.create_logged_model(experiment_id=experiment, name="model", source_run_id=run_id)
    client.finalize_logged_model(model.model_id, "READY")
    client.set_tag(run_id, MODEL_URI, f"models:/{model.model_id}")
    return run_id


def _register(client: MlflowClient, job: str, run_id: str, team: str = "nlp") -> dict[str, Any]:
    best = {"run_id": run_id, "trial_id": "t1"}
    return register_best(client, team=team, task="rte", job_id=job, spec_hash=f"hash-{job}", best=best,
                         main_metric="accuracy")  # fmt: skip


def test_jobs_add_versions_to_the_teams_model_and_best_moves_only_on_a_better_score(
    mlflow_uri: str, tmp_path: Path
) -> None:
    client = MlflowClient(mlflow_uri)
    experiment = client.create_experiment("smartune-nlp", artifact_location=(tmp_path / "art").as_uri())
    name = "smartune-nlp-rte"

    first = _register(client, "job-1", _trial_run(client, experiment, "job-1", 0.70))
    assert first["name"] == name and first["version"] == "1" and first["alias_moved"] is True
    assert first["uri"] == f"models:/{name}/1" and first["best_uri"] == f"models:/{name}@best"
    assert first["best_version"] == "1" and first["dev_score"] == pytest.approx(0.70)
    registered = client.get_registered_model(name)
    assert registered.tags == {TEAM_TAG: "nlp", TASK_TAG: "rte"}

    worse = _register(client, "job-2", _trial_run(client, experiment, "job-2", 0.65))
    assert worse["version"] == "2" and worse["alias_moved"] is False and worse["best_version"] == "1"
    assert worse["alias_note"] == "best stays at version 1: dev accuracy 0.6500 does not beat 0.7000"

    better_run = _trial_run(client, experiment, "job-3", 0.75)
    better = _register(client, "job-3", better_run)
    assert better["version"] == "3" and better["alias_moved"] is True and better["best_version"] == "3"
    assert better["alias_note"] == "took best from version 1: dev accuracy 0.7500 > 0.7000"
    assert _register(client, "job-3", better_run)["version"] == "3"  # a later attempt, the same best

    other_rows = _register(
        client, "job-4", _trial_run(client, experiment, "job-4", 0.99, max_eval_samples="16")
    )
    assert other_rows["version"] == "4" and other_rows["alias_moved"] is False
    assert other_rows["alias_note"].startswith("not comparable: scored on other dev rows than version 3")

    assert str(client.get_model_version_by_alias(name, "best").version) == "3"
    versions = {str(v.version): v.tags for v in client.search_model_versions(f"name = '{name}'")}
    assert sorted(versions) == ["1", "2", "3", "4"]
    assert (
        versions["2"][JOB] == "job-2"
        and versions["2"][TRIAL] == "t1"
        and versions["2"][SPEC_HASH] == "hash-job-2"
    )
    assert float(versions["2"][DEV_SCORE]) == pytest.approx(0.65) and versions["2"][MAX_EVAL_SAMPLES] == "64"
    assert versions["4"][MAX_EVAL_SAMPLES] == "16" and versions["4"][EVAL_ROWS] != versions["3"][EVAL_ROWS]
    assert versions["2"][ALIAS_NOTE] == worse["alias_note"]
    # Another team's job on the same task lands in its own model.
    theirs = _register(client, "job-5", _trial_run(client, experiment, "job-5", 0.5), team="vision")
    assert theirs["name"] == "smartune-vision-rte" and theirs["version"] == "1" and theirs["alias_moved"]


def test_a_multitask_task_run_is_scored_with_its_trials_params(mlflow_uri: str, tmp_path: Path) -> None:
    client = MlflowClient(mlflow_uri)
    experiment = client.create_experiment("smartune-nlp", artifact_location=(tmp_path / "art").as_uri())
    trial = _trial_run(client, experiment, "job-1", 0.6)
    task_run = client.create_run(experiment, tags={JOB: "job-1", PARENT: trial, "smartune.task": "rte"})
    client.log_metric(task_run.info.run_id, "best_score", 0.8)
    client.set_tag(task_run.info.run_id, MODEL_URI, client.get_run(trial).data.tags[MODEL_URI])
    registered = _register(client, "job-1", task_run.info.run_id)
    assert registered["dev_score"] == pytest.approx(0.8)
    version = client.get_model_version("smartune-nlp-rte", registered["version"])
    assert version.tags[EVAL_ROWS] == eval_rows_digest(RTE, "rte", "accuracy")


def test_a_trial_that_chose_on_held_out_rows_is_scored_on_dev(mlflow_uri: str, tmp_path: Path) -> None:
    client = MlflowClient(mlflow_uri)
    experiment = client.create_experiment("smartune-nlp", artifact_location=(tmp_path / "art").as_uri())
    run_id = _trial_run(client, experiment, "job-1", 0.9)  # best_score: the held-out rows' metric
    client.log_metric(run_id, "dev_score_at_best", 0.72)
    assert _register(client, "job-1", run_id)["dev_score"] == pytest.approx(0.72)


def test_a_registry_failure_is_recorded_not_raised(mlflow_uri: str, tmp_path: Path) -> None:
    client = MlflowClient(mlflow_uri)
    experiment = client.create_experiment("e", artifact_location=(tmp_path / "art").as_uri())
    run = client.create_run(experiment)  # no checkpoint, no logged model: nothing can be registered
    registered = _register(client, "job-x", run.info.run_id)
    assert registered["name"] == "smartune-nlp-rte" and registered["version"] is None and registered["error"]
    assert register_best(client, team="nlp", task="rte", job_id="j", spec_hash="h", best=None,
                         main_metric="accuracy") == {
        "name": "smartune-nlp-rte", "alias": "best", "version": None, "error": "no trial completed: nothing to register"
    }  # fmt: skip
