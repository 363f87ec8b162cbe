"""What a new attempt does with the trial runs an interrupted attempt left, on a real MLflow store: when the
sweep resumes, each interrupted run waits (KILLED, PENDING) for its trial to continue it; when there was no
state to resume (the driver died before Tune first wrote it), the sweep starts over under new trial ids and
the old runs go to MLflow's trash, so every trial keeps exactly one run."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow import MlflowClient

from worker.tune.tracking import (
    TrackingTarget,
    close_stale_children,
    ensure_experiment,
    find_runs,
    open_trial_run,
)


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
