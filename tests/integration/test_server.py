"""`smartune serve` for real: uvicorn, the shared local Ray head (2 logical GPUs), the sweep driver, the
MLflow store in the data directory. Tiny sweeps (tiny-random BERT, 32 RTE examples) keep it short."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest

from service.engine.ray_jobs import JobSubmissionAdapter
from tests.integration.client import FINAL, ONE_TRIAL, Api, tiny_spec
from tests.support.cluster import Postgres, RayHead, Server, make_server


def test_a_tiny_job_succeeds_with_trials_results_and_mlflow_links(server: Server, ray_head: RayHead) -> None:
    admin = Api(server, server.admin_key())
    api = Api(server, admin.team_key("nlp"))
    assert api("GET", "/readyz").json() == {"status": "ok", "database": "ok", "ray": "ok"}
    deadline = time.monotonic() + 60
    while not (capacity := api("GET", "/api/v1/pool").json()["capacity"]) and time.monotonic() < deadline:
        time.sleep(0.5)  # the engine's first round has not read the cluster yet
    while capacity["cpus"] == 0 and time.monotonic() < deadline:  # a fresh head lists its node a moment late
        time.sleep(0.5)
        capacity = api("GET", "/api/v1/pool").json()["capacity"]
    assert capacity == {"cpus": 4.0, "gpus": 2.0}
    (node,) = JobSubmissionAdapter(ray_head.address).nodes()  # the pool page's per-node GPU memory
    assert node["resources_total"]["GPU"] == 2.0 and node["node"]
    job_id = api.submit(tiny_spec())
    job = api.wait(job_id, lambda j: j["state"] in FINAL)
    assert job["state"] == "SUCCEEDED", job["message"]
    assert job["submission_id"] == f"{job_id}-a1" and job["attempt"] == 1
    assert len(job["trials"]) == 2 and {t["state"] for t in job["trials"]} == {"TERMINATED"}
    assert all(t["best_score"] is not None and t["mlflow_run_id"] for t in job["trials"])
    assert job["mlflow_parent_run_id"] and job["mlflow_url"].endswith(f"/runs/{job['mlflow_parent_run_id']}")
    assert all(t["mlflow_url"].endswith(t["mlflow_run_id"]) for t in job["trials"])
    assert [t["to_state"] for t in job["transitions"]] == ["QUEUED", "DISPATCHED", "RUNNING", "SUCCEEDED"]
    # estimated vs actual device-hours: tiny-random has no packaged calibration, so the job's estimate is
    # unknown; its finished trials measured it, so the same spec is now priced from this deployment's table
    cost = job["cost"]
    assert cost["unit"] == "cpu-hours" and cost["actual_hours"] > 0 and cost["estimated_hours"] is None
    plan = api("POST", "/api/v1/jobs", params={"dry_run": "true"}, json=tiny_spec()).json()
    assert plan["device_hours"] > 0, plan["unknown"]
    assert "measured here" in plan["groups"][0]["calibration"]["entry"]["source"]
    results = api("GET", f"/api/v1/jobs/{job_id}/results").json()
    assert results["job_id"] == job_id and len(results["cells"]) == 2
    assert results["best"]["value"] == job["best_value"]
    assert results["parent_run_id"] == job["mlflow_parent_run_id"]
    logs = api("GET", f"/api/v1/jobs/{job_id}/logs").text
    assert f'"job_id": "{job_id}"' in logs.strip().splitlines()[-1]

    # An audit of the best trial: a Ray job of its own, re-running it from its MLflow record alone.
    other = Api(server, admin.team_key("vision"))
    assert other("POST", f"/api/v1/jobs/{job_id}/audits", expect=404, json={}).status_code == 404
    audit = api("POST", f"/api/v1/jobs/{job_id}/audits", expect=201, json={}).json()
    assert audit["kind"] == "audit" and audit["audit_of"] == job_id
    done = api.wait(audit["id"], lambda j: j["state"] in FINAL)
    assert done["state"] == "SUCCEEDED", done["message"]
    report = api("GET", f"/api/v1/jobs/{audit['id']}/results").json()
    assert report["verdict"] == "PASS", report["trials"][0]["reason"]
    best = max(
        sorted(job["trials"], key=lambda t: t["trial_id"]), key=lambda t: t["best_score"]
    )  # ties: 1st id
    assert report["trials"][0]["run_id"] == best["mlflow_run_id"] and report["trials"][0]["exact"]
    assert all(m["recorded"] == m["rerun"] for m in report["trials"][0]["metrics"])


def test_a_multitask_job_gives_each_task_its_result_and_registered_model(server: Server) -> None:
    """MT-DNN-SMART through the real server: REST results per task, each task's best model registered."""
    api = Api(server, Api(server, server.admin_key()).team_key("nlp"))
    one_cell = {"axes": {"learning_rate": {"type": "grid", "values": [5e-4]}}}
    spec = tiny_spec(task=["rte", "stsb"], multitask={"sampling": "round-robin", "finetune_epochs": 1},
                     search_space=one_cell)  # fmt: skip
    job_id = api.submit(spec)
    job = api.wait(job_id, lambda j: j["state"] in FINAL)
    assert job["state"] == "SUCCEEDED", job["message"]
    results = api("GET", f"/api/v1/jobs/{job_id}/results").json()
    assert set(results["tasks"]) == set(results["best"]["tasks"]) == {"rte", "stsb"}
    for task, result in results["tasks"].items():
        assert result["stage"] in ("joint", "finetune") and result["trial_id"] == results["best"]["trial_id"]
        registered, name = result["registered_model"], f"smartune-nlp-{task}"  # the team's model of the task
        assert registered["name"] == name and registered["uri"] == f"models:/{name}/{registered['version']}"
        assert registered["best_uri"] == f"models:/{name}@best" and registered["alias_note"]


def test_auth_negatives_over_http(server: Server) -> None:
    admin = Api(server, server.admin_key())
    mine, theirs = Api(server, admin.team_key("alpha")), Api(server, admin.team_key("beta"))
    refused = mine("POST", "/api/v1/jobs", expect=422, json=tiny_spec(resources={"cpus": 64, "gpus": 0}))
    assert (
        refused.json()["field"] == "resources.cpus" and "exceed" in refused.json()["detail"]
    )  # never queued
    job_id = mine.submit(tiny_spec(name="cancelled below"))
    assert httpx.get(f"{server.url}/api/v1/jobs").status_code == 401
    assert httpx.get(f"{server.url}/healthz").status_code == 200
    assert theirs("GET", f"/api/v1/jobs/{job_id}", expect=404).json()["field"] is None
    assert theirs("POST", f"/api/v1/jobs/{job_id}/cancel", expect=404)
    assert mine("GET", "/api/v1/teams", expect=403)
    key_id = mine("GET", "/api/v1/keys/me").json()["key_id"]
    admin("DELETE", f"/api/v1/keys/{key_id}")
    assert mine("GET", f"/api/v1/jobs/{job_id}", expect=401)
    assert admin("GET", f"/api/v1/jobs/{job_id}").json()["id"] == job_id
    admin("POST", f"/api/v1/jobs/{job_id}/cancel")


@pytest.mark.slow
def test_a_restart_mid_job_finishes_and_records_it_once(server: Server) -> None:
    admin = Api(server, server.admin_key())
    key = admin.team_key("nlp")
    api = Api(server, key)
    spec = tiny_spec(training={**tiny_spec()["training"], "epochs": 3}, limits={"max_concurrent_trials": 1})
    job_id = api.submit(spec)
    api.wait(job_id, lambda j: j["state"] == "RUNNING" and j["trials"])
    server.stop(signal.SIGKILL)  # a crash, mid-sweep: the Ray job keeps running
    time.sleep(3)
    server.start()
    api = Api(server, key)
    job = api.wait(job_id, lambda j: j["state"] in FINAL)
    assert job["state"] == "SUCCEEDED", job["message"]
    assert [a["submission_id"] for a in job["attempts"]] == [f"{job_id}-a1"]  # dispatched once
    changes = [t for t in job["transitions"] if t["from_state"] != t["to_state"]]  # not the timeline's notes
    assert [t["to_state"] for t in changes].count("SUCCEEDED") == 1
    assert len(job["trials"]) == 2 and {t["state"] for t in job["trials"]} == {"TERMINATED"}


@pytest.mark.slow
def test_two_teams_share_a_two_gpu_pool_and_a_third_job_waits(server: Server) -> None:
    admin = Api(server, server.admin_key())
    alpha = Api(server, admin.team_key("alpha", gpu_quota=1))
    beta = Api(server, admin.team_key("beta", gpu_quota=1))
    gpu_spec = tiny_spec(
        resources={"cpus": 1, "gpus": 1},
        limits={"max_concurrent_trials": 1},
        search_space=ONE_TRIAL,  # the queue is under test, not the trials
        training={**tiny_spec()["training"], "epochs": 2},
    )
    a1, a2, b1 = alpha.submit(gpu_spec), alpha.submit(gpu_spec | {"seeds": [2]}), beta.submit(gpu_spec)
    running = ("DISPATCHED", "RUNNING")
    alpha.wait(a1, lambda j: j["state"] in running)
    beta.wait(b1, lambda j: j["state"] in running)
    waiting = alpha.job(a2)
    assert (
        waiting["state"] == "QUEUED"
        and waiting["wait_reason"] == "team quota: 1/1 GPUs in use, needs 1 GPU at its peak"
    )
    queue = alpha("GET", "/api/v1/pool/queue").json()["data"]
    assert [(e["job_id"], e["reason"]) for e in queue] == [(a2, waiting["wait_reason"])]
    pool = alpha("GET", "/api/v1/pool").json()
    assert {t["team"]: t["gpus_in_use"] for t in pool["teams"]} == {"alpha": 1.0}  # its own team by name
    assert pool["others"]["teams"] == 1 and pool["others"]["gpus_in_use"] == 1.0  # the others as totals
    first = alpha.wait(a1, lambda j: j["state"] in FINAL)
    assert first["state"] == "SUCCEEDED", first["message"]
    second = alpha.wait(a2, lambda j: j["state"] in FINAL)
    assert second["state"] == "SUCCEEDED", second["message"]
    assert second["started_at"] >= first["finished_at"]
    assert beta.wait(b1, lambda j: j["state"] in FINAL)["state"] == "SUCCEEDED"


@pytest.mark.slow
def test_cancel_stops_the_ray_job_and_kills_the_mlflow_runs(server: Server) -> None:
    from mlflow.tracking import MlflowClient

    admin = Api(server, server.admin_key())
    api = Api(server, admin.team_key("nlp"))
    spec = tiny_spec(training={**tiny_spec()["training"], "epochs": 20, "max_train_samples": 64})
    job_id = api.submit(spec)
    api.wait(job_id, lambda j: j["state"] == "RUNNING" and any(t["state"] == "RUNNING" for t in j["trials"]))
    assert api("POST", f"/api/v1/jobs/{job_id}/cancel").json()["state"] == "CANCELLED"
    job = api.wait(job_id, lambda j: j["attempts"][0]["ended_at"] is not None, timeout=120, past_the_end=True)
    assert job["attempts"][0]["state"] == "STOPPED"
    client = MlflowClient(f"sqlite:///{server.data_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("smartune-nlp")  # one experiment per team
    runs = client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`smartune.job_id` = '{job_id}'"
    )
    assert runs and all(r.info.status in ("KILLED", "FINISHED", "FAILED") for r in runs)
    assert any(r.info.status == "KILLED" for r in runs)


EPOCHS = 20


def test_a_failed_job_retried_resumes_where_it_stopped(server: Server, ray_head: RayHead) -> None:
    """A job whose Ray job was stopped behind smartune's back FAILS; `retry` queues it again and its next
    attempt resumes the trials from their checkpoints instead of training them again."""
    api = Api(server, Api(server, server.admin_key()).team_key("nlp"))
    # Epochs of a second or so: the stop must land before the last one (CI once saw 4 epochs pass between
    # the poll that saw epoch 2 and the driver's end), so the trial has many left.
    spec = tiny_spec(training={**tiny_spec()["training"], "epochs": EPOCHS, "max_train_samples": 64},
                     search_space={"axes": {"learning_rate": {"type": "grid", "values": [5e-4]}}})  # fmt: skip
    job_id = api.submit(spec)
    api.wait(job_id, lambda j: any((t["last_epoch"] or 0) >= 2 for t in j["trials"]))
    JobSubmissionAdapter(ray_head.address).stop(f"{job_id}-a1")  # not through smartune: a failure to it
    failed = api.wait(job_id, lambda j: j["state"] == "FAILED", past_the_end=True)
    stopped_at = failed["trials"][0]["last_epoch"]
    assert "stopped" in failed["message"] and stopped_at < EPOCHS  # Ray: "Job was intentionally stopped."
    assert api("POST", f"/api/v1/jobs/{job_id}/retry").json()["state"] == "QUEUED"
    job = api.wait(job_id, lambda j: j["state"] in FINAL)
    assert job["state"] == "SUCCEEDED", job["message"]
    assert [(a["number"], a["state"]) for a in job["attempts"]] == [(1, "STOPPED"), (2, "SUCCEEDED")]
    assert job["trials"][0]["state"] == "TERMINATED" and job["trials"][0]["last_epoch"] == EPOCHS
    assert (
        "resuming <path>" in api("GET", f"/api/v1/jobs/{job_id}/logs").text
    )  # Tune restored (a team reads paths scrubbed)


@pytest.mark.slow
def test_the_same_tiny_job_on_postgresql(
    tmp_path: Path, ray_head: RayHead, postgres: Postgres, glue_dir: Path
) -> None:
    server = make_server(
        tmp_path, ray_address=ray_head.address, database_url=postgres.create_database("serve_e2e")
    )
    server.start()
    try:
        admin = Api(server, server.admin_key())
        api = Api(server, admin.team_key("nlp"))
        job_id = api.submit(tiny_spec())
        job = api.wait(job_id, lambda j: j["state"] in FINAL)
        assert job["state"] == "SUCCEEDED", job["message"]
        assert len(job["trials"]) == 2
        assert api("GET", f"/api/v1/jobs/{job_id}/results").json()["job_id"] == job_id
    finally:
        server.stop()


@pytest.mark.slow
def test_a_job_lost_with_its_ray_head_is_requeued_and_resumes(tmp_path: Path, glue_dir: Path) -> None:
    """The Ray head dies mid-sweep; a new one comes up at the same address: the job is LOST, requeued as
    attempt 2, and the sweep driver resumes the Tune experiment from the storage path."""
    from tests.support.cluster import start_ray_head

    head = start_ray_head()
    server = make_server(tmp_path, ray_address=head.address).start()
    try:
        admin = Api(server, server.admin_key())
        api = Api(server, admin.team_key("nlp"))
        # Long enough that the crash comes mid-sweep (it follows the first sight of epoch 2 within a poll),
        # short enough that attempt 2's rest of the sweep is not the test's main cost (~1 s an epoch).
        long_training = {**tiny_spec()["training"], "epochs": 20, "max_train_samples": 128}
        spec = tiny_spec(training=long_training, search_space=ONE_TRIAL)
        job_id = api.submit(spec)
        running = api.wait(job_id, lambda j: any((t["last_epoch"] or 0) >= 2 for t in j["trials"]))
        assert running["trials"][0]["last_epoch"] < 10, "the sweep runs too fast to be interrupted"
        head.crash()  # the head and every Ray job on it are gone
        old_head, head = head, start_ray_head(ports=head.ports)
        old_head.stop()
        job = api.wait(job_id, lambda j: j["state"] in FINAL, timeout=420)
        assert job["state"] == "SUCCEEDED", job["message"]
        assert [(a["number"], a["state"]) for a in job["attempts"]] == [(1, "LOST"), (2, "SUCCEEDED")]
        states = [t["to_state"] for t in job["transitions"]]
        assert states == [
            "QUEUED",
            "DISPATCHED",
            "RUNNING",
            "LOST",
            "QUEUED",
            "DISPATCHED",
            "RUNNING",
            "SUCCEEDED",
        ]
        assert [(t["state"], t["last_epoch"]) for t in job["trials"]] == [("TERMINATED", 20)]
    finally:
        server.stop()
        head.stop()
