"""The jobs API over a fake Ray: submit, idempotency, list and paginate, read, cancel, logs, results."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from service.config import Settings
from service.engine.rounds import Engine
from tests.service.fakes import FakeRay, FakeTracker, summary_for, summary_line
from tests.service.utils import auth, spec, submit


def test_submit_queues_the_job_and_reports_its_hash(client: TestClient, team_key: str) -> None:
    response = client.post("/api/v1/jobs", json=spec(), headers=auth(team_key))
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["state"] == "QUEUED"
    assert job["team"] == "nlp"
    assert job["n_trials"] == 2  # two learning rates x one seed
    assert len(job["spec_hash"]) == 64
    assert job["identical_jobs"] == [] and job["replayed"] is False
    again = submit(client, team_key)
    assert again["spec_hash"] == job["spec_hash"]
    assert again["identical_jobs"] == [job["id"]]


def test_idempotency_key_returns_the_original_job(client: TestClient, team_key: str) -> None:
    first = client.post("/api/v1/jobs", json=spec(), headers={**auth(team_key), "Idempotency-Key": "k1"})
    second = client.post("/api/v1/jobs", json=spec(), headers={**auth(team_key), "Idempotency-Key": "k1"})
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json()["id"] == first.json()["id"] and second.json()["replayed"] is True
    other = client.post(
        "/api/v1/jobs", json=spec(seeds=[2]), headers={**auth(team_key), "Idempotency-Key": "k1"}
    )
    assert other.status_code == 409
    assert other.json()["field"] == "header.idempotency-key"
    assert client.get("/api/v1/jobs", headers=auth(team_key)).json()["count"] == 1


def test_idempotency_keys_are_per_team(client: TestClient, team_key: str, other_key: str) -> None:
    a = submit(client, team_key, **{"Idempotency-Key": "same"})
    b = submit(client, other_key, **{"Idempotency-Key": "same"})
    assert a["id"] != b["id"]


def test_list_filters_by_state_and_paginates(client: TestClient, team_key: str, engine: Engine) -> None:
    ids = [submit(client, team_key, spec(seeds=[s]))["id"] for s in (1, 2, 3)]
    client.post(f"/api/v1/jobs/{ids[0]}/cancel", headers=auth(team_key))
    page = client.get("/api/v1/jobs", params={"limit": 2, "offset": 0}, headers=auth(team_key)).json()
    assert page["count"] == 3 and [j["id"] for j in page["data"]] == ids[::-1][:2]
    rest = client.get("/api/v1/jobs", params={"limit": 2, "offset": 2}, headers=auth(team_key)).json()
    assert [j["id"] for j in rest["data"]] == [ids[0]]
    cancelled = client.get("/api/v1/jobs", params={"state": "CANCELLED"}, headers=auth(team_key)).json()
    assert [j["id"] for j in cancelled["data"]] == [ids[0]]
    both = client.get(
        "/api/v1/jobs", params={"state": ["CANCELLED", "QUEUED"]}, headers=auth(team_key)
    ).json()
    assert both["count"] == 3
    bad = client.get("/api/v1/jobs", params={"state": "DONE"}, headers=auth(team_key))
    assert bad.status_code == 422 and bad.json()["field"] == "query.state.0"


def test_a_job_runs_to_success_with_trials_and_results(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker
) -> None:
    job_id = submit(client, team_key)["id"]
    engine.tick()
    sid = f"{job_id}-a1"
    assert fake_ray.submissions == [sid]
    submitted = fake_ray.jobs[sid]
    assert submitted.entrypoint.endswith(f"-m worker.tune.sweep --job-id {job_id} --attempt 1")
    assert submitted.env_vars["SMARTUNE_JOB_SPEC"].startswith("{")
    assert {"SMARTUNE_STORAGE_PATH", "MLFLOW_TRACKING_URI", "SMARTUNE_MLFLOW_EXPERIMENT"} <= set(
        submitted.env_vars
    )
    assert client.get(f"/api/v1/jobs/{job_id}", headers=auth(team_key)).json()["state"] == "DISPATCHED"

    fake_ray.set(sid, "RUNNING")
    fake_tracker.log_trial(job_id, "t1", "RUNNING", 0.5, epoch=0)
    engine.tick()
    job = client.get(f"/api/v1/jobs/{job_id}", headers=auth(team_key)).json()
    assert job["state"] == "RUNNING" and job["submission_id"] == sid
    assert job["trials"][0]["state"] == "RUNNING" and job["trials"][0]["best_score"] == 0.5
    assert job["trials"][0]["mlflow_url"] == f"http://mlflow.test/#/experiments/1/runs/run-{job_id}-t1"
    assert job["progress"] == {"total": 2, "by_state": {"RUNNING": 1}}
    results = client.get(f"/api/v1/jobs/{job_id}/results", headers=auth(team_key))
    assert results.status_code == 409

    fake_tracker.log_trial(job_id, "t1", "TERMINATED", 0.7, epoch=1)
    fake_tracker.log_trial(job_id, "t2", "TERMINATED", 0.6, epoch=1)
    fake_tracker.summaries[job_id] = summary_for(job_id, 0.7)
    fake_ray.set(sid, "SUCCEEDED", logs="done\n")
    engine.tick()
    job = client.get(f"/api/v1/jobs/{job_id}", headers=auth(team_key)).json()
    assert job["state"] == "SUCCEEDED" and job["best_value"] == 0.7 and job["finished_at"]
    assert [t["state"] for t in job["trials"]] == ["TERMINATED", "TERMINATED"]
    assert job["mlflow_url"] == f"http://mlflow.test/#/experiments/1/runs/parent-{job_id}"
    assert [t["to_state"] for t in job["transitions"]] == ["QUEUED", "DISPATCHED", "RUNNING", "SUCCEEDED"]
    assert job["attempts"][0]["state"] == "SUCCEEDED"
    results = client.get(f"/api/v1/jobs/{job_id}/results", headers=auth(team_key)).json()
    assert results["best"]["value"] == 0.7 and results["cells"][0]["n"] == 2
    assert client.get(f"/api/v1/jobs/{job_id}/logs", headers=auth(team_key)).text == "done\n"


def test_summary_falls_back_to_the_drivers_last_line(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay
) -> None:
    job_id = submit(client, team_key)["id"]
    engine.tick()
    fake_ray.set(f"{job_id}-a1", "SUCCEEDED", logs="training...\n" + summary_line(job_id))
    engine.tick()
    results = client.get(f"/api/v1/jobs/{job_id}/results", headers=auth(team_key)).json()
    assert results["job_id"] == job_id


def test_a_failed_ray_job_fails_the_job_with_the_log_tail_for_admins_only(
    client: TestClient,
    team_key: str,
    admin_key: str,
    engine: Engine,
    fake_ray: FakeRay,
    fake_tracker: FakeTracker,
) -> None:
    job_id = submit(client, team_key)["id"]
    engine.tick()
    fake_tracker.log_trial(job_id, "t1", "RUNNING")
    fake_ray.set(f"{job_id}-a1", "FAILED", logs="Traceback\nValueError: no data\n", message="exit code 1")
    engine.tick()
    job = client.get(f"/api/v1/jobs/{job_id}", headers=auth(team_key)).json()
    assert job["state"] == "FAILED"
    assert job["message"] == "exit code 1"  # the team sees the reason, not the driver's log (server paths)
    assert job["trials"][0]["state"] == "STOPPED"
    as_admin = client.get(f"/api/v1/jobs/{job_id}", headers=auth(admin_key)).json()
    assert "exit code 1" in as_admin["message"] and "ValueError: no data" in as_admin["message"]
    assert (job_id, "FAILED") in fake_tracker.ended


def test_cancel_a_queued_job(client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay) -> None:
    job_id = submit(client, team_key)["id"]
    response = client.post(f"/api/v1/jobs/{job_id}/cancel", headers=auth(team_key))
    assert response.status_code == 200 and response.json()["state"] == "CANCELLED"
    engine.tick()
    assert fake_ray.submissions == []
    again = client.post(f"/api/v1/jobs/{job_id}/cancel", headers=auth(team_key))
    assert again.status_code == 200  # idempotent


def test_cancel_a_running_job_stops_ray_and_kills_runs(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker
) -> None:
    job_id = submit(client, team_key)["id"]
    engine.tick()
    sid = f"{job_id}-a1"
    fake_ray.set(sid, "RUNNING")
    fake_tracker.log_trial(job_id, "t1", "RUNNING", 0.4)
    engine.tick()
    response = client.post(f"/api/v1/jobs/{job_id}/cancel", headers=auth(team_key))
    assert response.json()["state"] == "CANCELLED"
    assert fake_ray.stopped == [sid]
    engine.tick()
    assert (job_id, "KILLED") in fake_tracker.ended
    job = client.get(f"/api/v1/jobs/{job_id}", headers=auth(team_key)).json()
    assert job["attempts"][0]["state"] == "STOPPED"
    assert job["trials"][0]["state"] == "STOPPED"
    finished = client.post(f"/api/v1/jobs/{job_id}/cancel", headers=auth(team_key))
    assert finished.status_code == 200


def test_cancel_a_finished_job_is_a_conflict(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay
) -> None:
    job_id = submit(client, team_key)["id"]
    engine.tick()
    fake_ray.set(f"{job_id}-a1", "SUCCEEDED", logs=summary_line(job_id))
    engine.tick()
    response = client.post(f"/api/v1/jobs/{job_id}/cancel", headers=auth(team_key))
    assert response.status_code == 409 and "SUCCEEDED" in response.json()["detail"]


def test_logs_before_dispatch_and_after_ray_forgot(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay
) -> None:
    job_id = submit(client, team_key)["id"]
    assert client.get(f"/api/v1/jobs/{job_id}/logs", headers=auth(team_key)).text == ""
    engine.tick()
    fake_ray.set(f"{job_id}-a1", "RUNNING", logs="a\nb\nc\n")
    assert (
        client.get(f"/api/v1/jobs/{job_id}/logs", params={"tail": 2}, headers=auth(team_key)).text == "b\nc"
    )
    assert (
        client.get(f"/api/v1/jobs/{job_id}/logs", params={"attempt": 2}, headers=auth(team_key)).status_code
        == 404
    )
    fake_ray.down = True
    assert client.get(f"/api/v1/jobs/{job_id}/logs", headers=auth(team_key)).status_code == 503


def test_retry_queues_a_failed_job_as_its_next_attempt(
    client: TestClient,
    team_key: str,
    other_key: str,
    engine: Engine,
    fake_ray: FakeRay,
    fake_tracker: FakeTracker,
) -> None:
    job_id = submit(client, team_key)["id"]
    assert client.post(f"/api/v1/jobs/{job_id}/retry", headers=auth(team_key)).status_code == 409  # QUEUED
    engine.tick()
    fake_ray.set(f"{job_id}-a1", "RUNNING")
    fake_tracker.log_trial(job_id, "t1", "TERMINATED", 0.7, epoch=1)
    engine.tick()
    running = client.post(f"/api/v1/jobs/{job_id}/retry", headers=auth(team_key))
    assert running.status_code == 409 and "only a FAILED job" in running.json()["detail"]
    fake_ray.set(f"{job_id}-a1", "FAILED", message="AttributeError: Can't get attribute 'X'")
    engine.tick()
    assert client.get(f"/api/v1/jobs/{job_id}", headers=auth(team_key)).json()["state"] == "FAILED"

    assert client.post(f"/api/v1/jobs/{job_id}/retry", headers=auth(other_key)).status_code == 404
    later = submit(client, team_key, spec(seeds=[2]))["id"]
    response = client.post(f"/api/v1/jobs/{job_id}/retry", headers=auth(team_key))
    assert response.status_code == 200 and response.json()["state"] == "QUEUED", response.text
    queue = client.get("/api/v1/pool/queue", headers=auth(team_key)).json()["data"]
    assert [e["job_id"] for e in queue] == [job_id, later]  # it takes its original place again
    client.post(f"/api/v1/jobs/{later}/cancel", headers=auth(team_key))
    job = client.get(f"/api/v1/jobs/{job_id}", headers=auth(team_key)).json()
    assert job["finished_at"] is None and job["message"] is None
    reason = job["transitions"][-1]["reason"]
    assert reason.startswith("retried by key ") and "Can't get attribute 'X'" in reason
    assert reason.endswith("attempt 2 resumes from its checkpoints")
    engine.tick()
    assert fake_ray.submissions[-1] == f"{job_id}-a2"
    assert (
        "--attempt 2" in fake_ray.jobs[f"{job_id}-a2"].entrypoint
    )  # the driver restores attempt 1's Tune state
    job = client.get(f"/api/v1/jobs/{job_id}", headers=auth(team_key)).json()
    assert [(a["number"], a["state"]) for a in job["attempts"]] == [(1, "FAILED"), (2, "SUBMITTED")]
    assert job["trials"][0]["state"] == "TERMINATED"  # what attempt 1 finished stays finished
    fake_ray.set(f"{job_id}-a2", "SUCCEEDED", logs=summary_line(job_id))
    engine.tick()
    assert client.get(f"/api/v1/jobs/{job_id}", headers=auth(team_key)).json()["state"] == "SUCCEEDED"


def test_retry_refuses_cancelled_jobs_and_a_full_queue(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, settings: Settings, app: Any
) -> None:
    cancelled = submit(client, team_key)["id"]
    client.post(f"/api/v1/jobs/{cancelled}/cancel", headers=auth(team_key))
    refused = client.post(f"/api/v1/jobs/{cancelled}/retry", headers=auth(team_key))
    assert refused.status_code == 409 and "submit its spec again" in refused.json()["detail"]
    failed = submit(client, team_key)["id"]
    engine.tick()
    fake_ray.set(f"{failed}-a1", "FAILED")
    engine.tick()
    app.state.settings = settings.model_copy(update={"max_queued_jobs_per_team": 2})
    submit(client, team_key, spec(seeds=[2]))
    submit(client, team_key, spec(seeds=[3]))
    full = client.post(f"/api/v1/jobs/{failed}/retry", headers=auth(team_key))
    assert full.status_code == 429 and "2 queued jobs" in full.json()["detail"]
    assert (
        client.get(f"/api/v1/jobs/{failed}", headers=auth(team_key)).json()["state"] == "FAILED"
    )  # unchanged
