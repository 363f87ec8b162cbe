"""What a new attempt does with the trial runs an interrupted attempt left, on a real MLflow store: when the
sweep resumes, each interrupted run waits (KILLED, PENDING) for its trial to continue it; when there was no
state to resume (the driver died before Tune first wrote it), the sweep starts over under new trial ids and
the old runs go to MLflow's trash, so every trial keeps exactly one run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow import MlflowClient

from worker.contract.spec import JobSpec
from worker.tune.outcomes import record_final_state
from worker.tune.tracking import (
    TrackingTarget,
    close_stale_children,
    ensure_experiment,
    find_runs,
    open_trial_run,
)
from worker.tune.tuning import cell_axes, resolve_trial, trial_configs


def _attempt_left_two_runs(tmp_path: Path, uri: str) -> tuple[MlflowClient, TrackingTarget]:
    client = MlflowClient(uri)
    target = TrackingTarget(uri, ensure_experiment(client, "smartune", (tmp_path / "art").as_uri()), "job-1")
    for trial in ("a_00000", "a_00001"):
        open_trial_run(client, target, trial_id=trial, parent_run_id="p", run_name=trial, tags={}, params={})
    return client, target


@pytest.mark.parametrize("resuming", [True, False])
def test_an_interrupted_attempts_runs_wait_or_go_to_the_trash(
    tmp_path: Path, mlflow_uri: str, resuming: bool
) -> None:
    client, target = _attempt_left_two_runs(tmp_path, mlflow_uri)
    assert sorted(close_stale_children(client, target, resuming)) == ["a_00000", "a_00001"]
    runs = find_runs(client, target)
    if resuming:
        assert [(r.info.status, r.data.tags["smartune.state"]) for r in runs] == [("KILLED", "PENDING")] * 2
    else:
        assert runs == []  # the search sees live runs only; the two are in the trash, ended as FAILED
        deleted = client.search_runs([target.experiment_id], run_view_type=2)  # ViewType.DELETED_ONLY
        assert sorted(r.info.status for r in deleted) == ["FAILED", "FAILED"]


def test_a_trial_that_failed_before_opening_its_run_is_recorded_with_its_params_and_cell(
    tmp_path: Path, mlflow_uri: str
) -> None:
    """Its run is made by the driver (worker.tune.outcomes.record_final_state): a failure record that says
    which learning rate and cell failed, as the trial's own run would (the stall test reads it so)."""
    spec = JobSpec.model_validate({"task": "rte", "model": "tiny-random", "data": "/abs/glue",
                                   "search_space": {"axes": {"learning_rate": {"values": [1e-4, 3e-4]}}}})  # fmt: skip
    axes = cell_axes(spec)
    resolved = resolve_trial({"train": trial_configs(spec, 1)[1]}, axes)
    client = MlflowClient(mlflow_uri)
    target = TrackingTarget(mlflow_uri, ensure_experiment(client, "smartune", (tmp_path / "a").as_uri()), "j")
    run = record_final_state(client, target, "p", "t_00001", "ERROR", RuntimeError("boom"), trial=resolved)
    assert run is not None
    recorded = client.get_run(run.info.run_id)
    assert recorded.data.params["learning_rate"] == "0.0003" and recorded.info.status == "FAILED"
    assert json.loads(recorded.data.tags["smartune.cell"]) == {"learning_rate": 3e-4}
    assert recorded.info.run_name == "t_00001 learning_rate=0.0003 seed=1", recorded.info.run_name
    assert recorded.data.tags["smartune.error_class"] and "boom" in recorded.data.tags["smartune.error"]
    # Not failed and never opened: nothing to record.
    assert record_final_state(client, target, "p", "t_00002", "PENDING", trial=resolved) is None
