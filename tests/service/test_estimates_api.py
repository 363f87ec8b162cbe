"""`POST /jobs?dry_run=true`, team budgets and a job's estimated vs actual device-hours, over the REST API
with fake Ray and MLflow."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.engine.rounds import Engine
from service.store.db import Database
from service.store.models import Job
from tests.service.fakes import FakeRay, FakeTracker, summary_for
from tests.service.utils import auth, make_team, spec, submit

# Priced by the packaged calibration: minilm-l6 vanilla on CPU (max_seq_length 32: the nearest, 64).
PRICED = spec(model="minilm-l6")


def dry_run(client: TestClient, key: str, body: dict[str, Any]) -> Any:
    return client.post("/api/v1/jobs", params={"dry_run": "true"}, json=body, headers=auth(key))


def test_a_dry_run_returns_the_plan_and_creates_nothing(client: TestClient, team_key: str) -> None:
    response = dry_run(client, team_key, PRICED)
    assert response.status_code == 200, response.text
    plan = response.json()
    assert plan["dry_run"] is True and plan["trials"] == 2 and plan["unit"] == "cpu-hours"
    group = plan["groups"][0]
    assert (group["train_examples"], group["eval_examples"]) == (32, 16)
    assert group["calibration"]["fallback"] == "nearest max_seq_length 64, scaled x0.50 by length"
    assert "bench/results/step.json" in group["calibration"]["entry"]["source"]
    assert plan["device_hours"] > 0 and plan["wall_hours"] > 0
    assert plan["budget"] == {**plan["budget"], "budget": None, "fits": True, "used": 0.0}
    assert client.get("/api/v1/jobs", headers=auth(team_key)).json()["count"] == 0


def test_a_dry_run_validates_as_a_submission_does(client: TestClient, team_key: str) -> None:
    bad = dry_run(client, team_key, spec(training={"epochs": 0}))
    assert bad.status_code == 422 and bad.json()["field"] == "training.epochs"
    too_many = dry_run(client, team_key, spec(seeds=list(range(6))))  # the deployment's max_seeds is 5
    assert too_many.status_code == 422 and too_many.json()["field"] == "seeds"
    outside = dry_run(client, team_key, spec(data="/nowhere/glue"))
    assert outside.status_code == 422 and outside.json()["field"] == "data"
    assert client.get("/api/v1/jobs", headers=auth(team_key)).json()["count"] == 0


def test_an_unpriced_spec_says_why(client: TestClient, team_key: str) -> None:
    plan = dry_run(client, team_key, spec(model="tiny-random")).json()
    assert plan["device_hours"] is None and "tiny-random" in plan["unknown"][0]


def test_a_submission_over_the_budget_is_refused_with_the_numbers(
    client: TestClient, db: Database, admin_key: str
) -> None:
    key = make_team(db, "small", cpu_hours_budget=0.001)
    estimate = dry_run(client, key, PRICED).json()
    assert estimate["budget"]["fits"] is False and "exceeds" in estimate["budget"]["refusal"]
    refused = client.post("/api/v1/jobs", json=PRICED, headers=auth(key))
    assert refused.status_code == 409, refused.text
    numbers = refused.json()["budget"]
    assert numbers["budget"] == 0.001 and numbers["used"] == 0.0 and numbers["estimate"] > 0.001
    assert "0.001 cpu-hours per 30 days" in refused.json()["detail"]
    # the admin raises it: the job fits, and its estimate is then reserved against the rest
    raised = client.patch("/api/v1/teams/small", json={"cpu_hours_budget": 10.0}, headers=auth(admin_key))
    assert raised.status_code == 200 and raised.json()["cpu_hours_budget"] == 10.0
    submit(client, key, PRICED)
    after = dry_run(client, key, PRICED).json()["budget"]
    assert after["reserved"] == pytest.approx(estimate["device_hours"]) and after["used"] == 0.0


def test_a_finished_job_shows_estimated_and_actual_hours(
    client: TestClient,
    team_key: str,
    engine: Engine,
    fake_ray: FakeRay,
    fake_tracker: FakeTracker,
    db: Database,
) -> None:
    job_id = submit(client, team_key, PRICED)["id"]
    engine.tick()
    sid = f"{job_id}-a1"
    fake_ray.set(sid, "RUNNING")
    fake_tracker.log_trial(job_id, "t1", "RUNNING", 0.5, epoch=0, wall_s=30.0)
    engine.tick()
    running = client.get(f"/api/v1/jobs/{job_id}", headers=auth(team_key)).json()["cost"]
    assert running["actual_hours"] is None and running["measured_hours"] == 30 / 3600
    config = {"model": "minilm-l6", "method": "vanilla", "max_seq_length": 32, "batch_size": 8}
    for trial in ("t1", "t2"):
        fake_tracker.log_trial(job_id, trial, "TERMINATED", 0.7, epoch=1, wall_s=36.0, device="cpu",
                               config=config, metrics={"score": 0.7, "mean_examples_per_s": 16.0})  # fmt: skip
    fake_tracker.summaries[job_id] = summary_for(job_id, 0.7)
    fake_ray.set(sid, "SUCCEEDED", logs="done\n")
    engine.tick()
    cost = client.get(f"/api/v1/jobs/{job_id}", headers=auth(team_key)).json()["cost"]
    assert cost["unit"] == "cpu-hours" and cost["actual_hours"] == 72 / 3600
    with db.sessions() as session:
        estimated = session.get(Job, job_id).estimated_hours  # type: ignore[union-attr]
    assert cost["estimated_hours"] == estimated
    assert abs(cost["relative_error"] - (estimated - 72 / 3600) / (72 / 3600)) < 1e-9
    # the finished trials refreshed the calibration: the next estimate uses the measured cost, exactly
    group = dry_run(client, team_key, PRICED).json()["groups"][0]
    assert group["calibration"]["fallback"] is None and group["calibration"]["train_s_per_example"] == 1 / 16
    assert "measured here" in group["calibration"]["entry"]["source"]


def test_a_gpu_submission_is_stored_with_its_memory_estimate_and_packed_fraction(
    client: TestClient, db: Database, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(settings, "gpu_kind", "NVIDIA H100 80GB HBM3")
    key = make_team(db, "gpu", gpu_quota=4.0)
    body = spec(model="minilm-l6", method="smart", resources={"cpus": 1, "gpus": 0.0625},
                training={"batch_size": 32, "max_seq_length": 512})  # fmt: skip
    plan = dry_run(client, key, body).json()
    mb = plan["memory"]["per_trial_mb"]
    packed = plan["memory"]["gpu_fraction"]
    assert mb > 0 and packed * plan["memory"]["gpu_memory_mb"] >= mb and packed > 0.0625  # packed by memory
    job_id = submit(client, key, body)["id"]
    with db.write_sessions() as session:
        stored = json.loads(session.get(Job, job_id).spec_json)["resources"]
    assert stored["gpu_memory_mb"] == pytest.approx(mb) and stored["gpus"] == pytest.approx(packed)
    given = submit(client, key, {**body, "resources": {"cpus": 1, "gpus": 0.5, "gpu_memory_mb": 1000}})["id"]
    with db.write_sessions() as session:
        kept = json.loads(session.get(Job, given).spec_json)["resources"]
    assert (kept["gpus"], kept["gpu_memory_mb"]) == (0.5, 1000)  # a stated figure and a larger fraction stay


def test_an_idempotent_replay_is_the_same_job_after_its_pin_changed(
    client: TestClient, db: Database, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pinned spec depends on the deployment's GPU (and its memory table, its datasets); the request
    does not. A client retrying after such a change gets its job back, not a 409."""
    key = make_team(db, "retry", gpu_quota=4.0)
    body = spec(model="minilm-l6", method="smart", resources={"cpus": 1, "gpus": 0.0625},
                training={"batch_size": 32, "max_seq_length": 512})  # fmt: skip
    headers = {**auth(key), "Idempotency-Key": "retry-1"}
    first = client.post("/api/v1/jobs", json=body, headers=headers)
    monkeypatch.setattr(
        settings, "gpu_kind", "NVIDIA H100 80GB HBM3"
    )  # now pins gpu_memory_mb and a fraction
    again = client.post("/api/v1/jobs", json=body, headers=headers)
    assert first.status_code == 201 and again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"] and again.json()["replayed"] is True
    other = client.post("/api/v1/jobs", json={**body, "seeds": [7]}, headers=headers)
    assert other.status_code == 409 and "different spec" in other.text  # a different request still is


def test_a_retry_must_fit_what_is_left_of_the_budget(
    client: TestClient, db: Database, admin_key: str, engine: Engine, fake_ray: FakeRay
) -> None:
    key = make_team(db, "small", cpu_hours_budget=10.0)
    job_id = submit(client, key, PRICED)["id"]
    engine.tick()
    fake_ray.set(f"{job_id}-a1", "FAILED")
    engine.tick()
    client.patch("/api/v1/teams/small", json={"cpu_hours_budget": 0.001}, headers=auth(admin_key))
    refused = client.post(f"/api/v1/jobs/{job_id}/retry", headers=auth(key))
    assert refused.status_code == 409 and "exceeds what is left" in refused.json()["detail"], refused.text
    client.patch("/api/v1/teams/small", json={"cpu_hours_budget": 10.0}, headers=auth(admin_key))
    assert client.post(f"/api/v1/jobs/{job_id}/retry", headers=auth(key)).json()["state"] == "QUEUED"
