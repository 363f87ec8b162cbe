"""Audits over a fake Ray: an audit of a SUCCEEDED job is a queued job of kind `audit` that dispatches the
worker's audit entrypoint on the chosen trials' runs, charged to the team; its report becomes its results."""

from __future__ import annotations

import json
import shlex
from typing import Any

from fastapi.testclient import TestClient

from service.engine.rounds import Engine
from tests.service.fakes import FakeRay, FakeTracker, summary_for
from tests.service.utils import auth, submit


def _succeeded(client: TestClient, key: str, engine: Engine, ray: FakeRay, tracker: FakeTracker) -> str:
    job_id = submit(client, key)["id"]
    engine.tick()
    tracker.log_trial(job_id, "t1", "TERMINATED", 0.7, epoch=2)
    tracker.log_trial(job_id, "t2", "TERMINATED", 0.8, epoch=2)
    tracker.log_trial(job_id, "t3", "ERROR", None)
    tracker.summaries[job_id] = summary_for(job_id, 0.8)
    ray.set(f"{job_id}-a1", "SUCCEEDED", logs="done\n")
    engine.tick()
    assert client.get(f"/api/v1/jobs/{job_id}", headers=auth(key)).json()["state"] == "SUCCEEDED"
    return job_id


def _report(audit_id: str, job_id: str, verdict: str = "PASS") -> str:
    trial = {"run_id": f"run-{job_id}-t2", "verdict": verdict, "reason": "34 metric values match exactly"}
    return json.dumps({"job_id": audit_id, "audit_of": job_id, "verdict": verdict, "trials": [trial]})


def test_an_audit_reruns_the_best_trial_and_reports(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker
) -> None:
    job_id = _succeeded(client, team_key, engine, fake_ray, fake_tracker)
    response = client.post(f"/api/v1/jobs/{job_id}/audits", json={}, headers=auth(team_key))
    assert response.status_code == 201, response.text
    audit = response.json()
    assert audit["kind"] == "audit" and audit["audit_of"] == job_id and audit["state"] == "QUEUED"
    assert audit["n_trials"] == 1 and audit["team"] == "nlp"
    engine.tick()
    sid = f"{audit['id']}-a1"
    words = shlex.split(fake_ray.jobs[sid].entrypoint)
    assert words[1:] == ["-m", "worker.tune.audit", "--job-id", job_id, "--audit-id", audit["id"],
                         "--run-id", f"run-{job_id}-t2"]  # fmt: skip
    assert "MLFLOW_TRACKING_URI" in fake_ray.jobs[sid].env_vars
    assert fake_ray.reserved[sid] == (1.0, 0.0)  # the driver re-trains: it holds a trial's resources
    assert fake_ray.reserved[f"{job_id}-a1"] == (0.0, 0.0)  # a sweep's driver holds none
    fake_ray.set(sid, "SUCCEEDED", logs="training...\n" + _report(audit["id"], job_id))
    engine.tick()
    done = client.get(f"/api/v1/jobs/{audit['id']}", headers=auth(team_key)).json()
    assert done["state"] == "SUCCEEDED" and done["transitions"][-1]["reason"].startswith("audit PASS")
    report = client.get(f"/api/v1/jobs/{audit['id']}/results", headers=auth(team_key)).json()
    assert report["verdict"] == "PASS" and report["trials"][0]["run_id"] == f"run-{job_id}-t2"
    listed = client.get(f"/api/v1/jobs/{job_id}/audits", headers=auth(team_key)).json()["data"]
    assert [a["id"] for a in listed] == [audit["id"]]


def test_named_trials_and_a_tolerance_reach_the_entrypoint(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker
) -> None:
    job_id = _succeeded(client, team_key, engine, fake_ray, fake_tracker)
    body = {"trials": ["t1", "t2", "t1"], "tolerance": 0.001}
    audit = client.post(f"/api/v1/jobs/{job_id}/audits", json=body, headers=auth(team_key)).json()
    assert audit["n_trials"] == 2
    engine.tick()
    words = shlex.split(fake_ray.jobs[f"{audit['id']}-a1"].entrypoint)
    assert words.count("--run-id") == 2 and words[-2:] == ["--tolerance", "0.001"]


def test_bad_audit_requests_name_the_field(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker
) -> None:
    job_id = _succeeded(client, team_key, engine, fake_ray, fake_tracker)
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"trials": ["nope"]}, 422, "trials.0"),
        ({"trials": ["t1", "t3"]}, 422, "trials.1"),  # t3 finished no epoch
        ({"trials": []}, 422, "trials"),
        ({"tolerance": -1}, 422, "tolerance"),
        ({"tolerence": 0.1}, 422, "tolerence"),
    ]
    for body, status, field in cases:
        response = client.post(f"/api/v1/jobs/{job_id}/audits", json=body, headers=auth(team_key))
        assert response.status_code == status and field in response.text, (body, response.text)


def test_only_a_succeeded_sweep_of_the_team_can_be_audited(
    client: TestClient,
    team_key: str,
    other_key: str,
    engine: Engine,
    fake_ray: FakeRay,
    fake_tracker: FakeTracker,
) -> None:
    queued = submit(client, team_key)["id"]
    response = client.post(f"/api/v1/jobs/{queued}/audits", json={}, headers=auth(team_key))
    assert response.status_code == 409 and "SUCCEEDED" in response.json()["detail"]
    job_id = _succeeded(client, team_key, engine, fake_ray, fake_tracker)
    assert client.post(f"/api/v1/jobs/{job_id}/audits", json={}, headers=auth(other_key)).status_code == 404
    assert client.get(f"/api/v1/jobs/{job_id}/audits", headers=auth(other_key)).status_code == 404
    audit = client.post(f"/api/v1/jobs/{job_id}/audits", json={}, headers=auth(team_key)).json()
    again = client.post(f"/api/v1/jobs/{audit['id']}/audits", json={}, headers=auth(team_key))
    assert again.status_code == 409 and "audit itself" in again.json()["detail"]


def test_an_audit_without_a_report_fails(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker
) -> None:
    job_id = _succeeded(client, team_key, engine, fake_ray, fake_tracker)
    audit = client.post(f"/api/v1/jobs/{job_id}/audits", json={}, headers=auth(team_key)).json()
    engine.tick()
    fake_ray.set(f"{audit['id']}-a1", "SUCCEEDED", logs="Traceback ...\n")
    engine.tick()
    done = client.get(f"/api/v1/jobs/{audit['id']}", headers=auth(team_key)).json()
    assert done["state"] == "FAILED" and "without a report" in done["message"]
