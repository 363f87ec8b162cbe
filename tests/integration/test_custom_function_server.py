"""Custom-function jobs through the real server (issue 33): REST to SUCCEEDED on the shared Ray head, with
MLflow parent and child runs; a trial whose function raises ends ERROR with class `user` while the other
finishes; a job of two good trials gets an audit that PASSes (the function re-run with the same values)."""

from __future__ import annotations

from typing import Any

from mlflow import MlflowClient

from tests.integration.client import FINAL, Api
from tests.support.cluster import RayHead, Server
from worker.contract.tags import ERROR_CLASS, ERROR_MESSAGE, JOB, PARENT, PROVENANCE_PREFIX

ENTRYPOINT = "examples.custom_function.linear_probe:train"  # the Ray head has the repository on PYTHONPATH


def function_spec(features: list[int]) -> dict[str, Any]:
    """Two trials (one per `features` value, the function's own axis), 2 epochs each: seconds of work."""
    return {
        "name": "custom-function",
        "task": "sst2",
        "function": {"entrypoint": ENTRYPOINT, "metric": "accuracy", "max_minutes": 1},
        "search_space": {"axes": {"features": {"type": "grid", "values": features}}},
        "training": {"epochs": 2, "batch_size": 32, "learning_rate": 0.5},
        "seeds": [1],
        "resources": {"cpus": 1},
        "limits": {"max_concurrent_trials": 1, "max_retries": 0},
    }


def test_custom_function_jobs_run_fail_per_trial_and_pass_their_audit(
    server: Server, ray_head: RayHead
) -> None:
    api = Api(server, Api(server, server.admin_key()).team_key("fn"))

    # One trial's function raises (features 0): that trial fails with class `user`, the other finishes.
    mixed = api.submit(function_spec([8, 0]))
    job = api.wait(mixed, lambda j: j["state"] in FINAL)
    assert job["state"] == "SUCCEEDED", job["message"]
    by_features = {t["params"].get("features"): t for t in job["trials"]}
    assert set(by_features) == {8, 0}, job["trials"]
    good, bad = by_features[8], by_features[0]
    assert good["state"] == "TERMINATED" and good["best_score"] is not None and good["last_epoch"] == 2
    assert bad["state"] == "ERROR" and bad["error_class"] == "user", bad
    tracking = MlflowClient(f"sqlite:///{server.data_dir / 'mlflow.db'}")  # once the server made its store
    failed = tracking.get_run(bad["mlflow_run_id"])
    assert failed.data.tags[ERROR_CLASS] == "user"
    assert (
        failed.data.tags[ERROR_MESSAGE] == "UserFunctionError: ValueError: features must be at least 1, got 0"
    )

    # Two good trials: SUCCEEDED, one parent and two child runs in MLflow, and an audit that PASSes.
    clean = api.submit(function_spec([8, 16]))
    job = api.wait(clean, lambda j: j["state"] in FINAL)
    assert job["state"] == "SUCCEEDED", job["message"]
    assert [t["state"] for t in job["trials"]] == ["TERMINATED", "TERMINATED"]
    runs = tracking.search_runs(
        [e.experiment_id for e in tracking.search_experiments()], f"tags.`{JOB}` = '{clean}'"
    )
    parents = [r for r in runs if PARENT not in r.data.tags]
    children = [r for r in runs if PARENT in r.data.tags]
    assert len(parents) == 1 and len(children) == 2
    assert {r.data.tags[PARENT] for r in children} == {parents[0].info.run_id}
    child = children[0]
    assert child.data.tags[f"{PROVENANCE_PREFIX}function"] == ENTRYPOINT
    assert {"accuracy", "dev_loss", "score", "best_score"} <= set(child.data.metrics)

    audit = api("POST", f"/api/v1/jobs/{clean}/audits", expect=201, json={}).json()
    done = api.wait(audit["id"], lambda j: j["state"] in FINAL)
    assert done["state"] == "SUCCEEDED", done["message"]
    report = api("GET", f"/api/v1/jobs/{audit['id']}/results").json()
    assert report["verdict"] == "PASS", report["trials"][0]["reason"]
    compared = {row["metric"] for row in report["trials"][0]["metrics"]}
    assert {"accuracy", "dev_loss", "score", "best_score"} <= compared and report["trials"][0]["exact"]
