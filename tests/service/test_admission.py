"""One admission for submissions, retries and audits (service.admission, issue 32): the budget, the
priority cap, the quotas and the queue hold for all three; the pool holds from the first request."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.config import Settings
from service.engine import local_head
from service.engine.rounds import Engine
from service.engine.scheduler import Resources
from service.store.db import Database
from tests.service.fakes import FakeRay, FakeTracker, summary_for
from tests.service.utils import auth, make_team, spec, submit

HOUR_S = 3600.0


def _job(client: TestClient, key: str, job_id: str) -> dict[str, Any]:
    return dict(client.get(f"/api/v1/jobs/{job_id}", headers=auth(key)).json())


def _succeeded(
    client: TestClient, key: str, engine: Engine, ray: FakeRay, tracker: FakeTracker, **changes: Any
) -> str:
    """A SUCCEEDED sweep whose two trials each ran an hour on 1 CPU (2 CPU-hours used)."""
    job_id = submit(client, key, spec(**changes))["id"]
    engine.tick()
    tracker.log_trial(job_id, "t1", "TERMINATED", 0.7, epoch=2, wall_s=HOUR_S)
    tracker.log_trial(job_id, "t2", "TERMINATED", 0.8, epoch=2, wall_s=HOUR_S)
    tracker.summaries[job_id] = summary_for(job_id, 0.8)
    ray.set(f"{job_id}-a1", "SUCCEEDED")
    engine.tick()
    assert _job(client, key, job_id)["state"] == "SUCCEEDED"
    return job_id


def _failed(client: TestClient, key: str, engine: Engine, ray: FakeRay, **changes: Any) -> str:
    job_id = submit(client, key, spec(**changes))["id"]
    engine.tick()
    ray.set(f"{job_id}-a1", "FAILED", message="a node died")
    engine.tick()
    assert _job(client, key, job_id)["state"] == "FAILED"
    return job_id


def test_an_audit_must_fit_what_is_left_of_the_budget(
    client: TestClient, db: Database, admin_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker
) -> None:  # fmt: skip
    key = make_team(db, "bravo", cpu_hours_budget=2.5)
    job_id = _succeeded(client, key, engine, fake_ray, fake_tracker)  # 2 of the 2.5 CPU-hours used
    refused = client.post(f"/api/v1/jobs/{job_id}/audits", json={}, headers=auth(key))
    assert refused.status_code == 409, refused.text  # re-running the best trial takes what it took: 1 hour
    numbers = refused.json()["budget"]
    assert numbers["estimate"] == pytest.approx(1.0) and numbers["used"] == pytest.approx(2.0)
    assert "exceeds what is left of the team's budget" in refused.json()["detail"]
    assert client.get(f"/api/v1/jobs/{job_id}/audits", headers=auth(key)).json()["data"] == []

    client.patch("/api/v1/teams/bravo", json={"cpu_hours_budget": 10.0}, headers=auth(admin_key))
    audit = client.post(f"/api/v1/jobs/{job_id}/audits", json={}, headers=auth(key))
    assert audit.status_code == 201, audit.text
    assert _job(client, key, audit.json()["id"])["cost"]["estimated_hours"] == pytest.approx(1.0)
    left = client.post("/api/v1/jobs", params={"dry_run": "true"}, json=spec(), headers=auth(key))
    assert left.json()["budget"]["reserved"] == pytest.approx(1.0)  # the queued audit holds its hour


def test_a_retry_and_an_audit_are_lowered_to_a_lowered_maximum_priority(
    client: TestClient, db: Database, admin_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker
) -> None:  # fmt: skip
    key = make_team(db, "bravo", max_priority=5)
    done = _succeeded(client, key, engine, fake_ray, fake_tracker, priority=5)
    failed = _failed(client, key, engine, fake_ray, priority=5, seeds=[2])
    lowered = client.patch("/api/v1/teams/bravo", json={"max_priority": 0}, headers=auth(admin_key))
    assert lowered.status_code == 200 and lowered.json()["max_priority"] == 0
    refused = client.post("/api/v1/jobs", json=spec(priority=5, seeds=[3]), headers=auth(key))
    assert refused.status_code == 422 and refused.json()["field"] == "priority"

    retried = client.post(f"/api/v1/jobs/{failed}/retry", headers=auth(key))
    assert retried.status_code == 200 and retried.json()["priority"] == 0, retried.text
    note = "priority lowered from 5 to 0, the team's maximum"
    reason = _job(client, key, failed)["transitions"][-1]["reason"]
    assert reason.startswith("retried by key ") and f", {note}, after: a node died" in reason
    audit = client.post(f"/api/v1/jobs/{done}/audits", json={}, headers=auth(key)).json()
    assert audit["priority"] == 0
    assert _job(client, key, audit["id"])["transitions"][0]["reason"] == f"audit of {done} submitted; {note}"
    queue = client.get("/api/v1/pool/queue", headers=auth(key)).json()["data"]
    assert {e["priority"] for e in queue} == {0}  # what the scheduler ranks them by


def test_a_default_priority_above_a_lowered_maximum_is_lowered_at_submission(
    client: TestClient, db: Database, admin_key: str
) -> None:
    key = make_team(db, "bravo", max_priority=5, default_priority=5)
    client.patch("/api/v1/teams/bravo", json={"max_priority": 0}, headers=auth(admin_key))
    job = submit(client, key)  # the spec sets no priority: the team's default, capped
    assert job["priority"] == 0
    assert _job(client, key, job["id"])["transitions"][0]["reason"].startswith("submitted; priority lowered")


def test_a_retry_and_an_audit_must_fit_the_quotas_as_they_are_now(
    client: TestClient, db: Database, admin_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker
) -> None:  # fmt: skip
    key = make_team(db, "bravo", cpu_quota=4)
    done = _succeeded(client, key, engine, fake_ray, fake_tracker, resources={"cpus": 2})
    two_at_once = {"max_concurrent_trials": 2}
    failed = _failed(client, key, engine, fake_ray, resources={"cpus": 2}, limits=two_at_once, seeds=[2])
    client.patch("/api/v1/teams/bravo", json={"cpu_quota": 1}, headers=auth(admin_key))
    for path in (f"/api/v1/jobs/{failed}/retry", f"/api/v1/jobs/{done}/audits"):
        refused = client.post(path, headers=auth(key))
        assert refused.status_code == 409 and refused.json()["field"] == "resources.cpus", refused.text
        assert "exceed the team's quota of 1" in refused.json()["detail"]
    assert _job(client, key, failed)["state"] == "FAILED"
    client.patch("/api/v1/teams/bravo", json={"cpu_quota": 3}, headers=auth(admin_key))
    refused = client.post(f"/api/v1/jobs/{failed}/retry", headers=auth(key))  # 2 trials x 2 CPUs at once
    assert refused.status_code == 409 and refused.json()["field"] == "limits.max_concurrent_trials"


def test_a_retry_and_an_audit_are_refused_while_the_team_is_at_its_storage_quota(
    client: TestClient, db: Database, admin_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker
) -> None:  # fmt: skip
    """Both add checkpoints, as a new job does: held to the disk quota as a submission is."""
    key = make_team(db, "bravo")
    done = _succeeded(client, key, engine, fake_ray, fake_tracker)
    failed = _failed(client, key, engine, fake_ray, seeds=[2])
    patched = client.patch("/api/v1/teams/bravo", json={"storage_quota_bytes": 0}, headers=auth(admin_key))
    assert patched.status_code == 200, patched.text
    for path in (f"/api/v1/jobs/{failed}/retry", f"/api/v1/jobs/{done}/audits"):
        refused = client.post(path, headers=auth(key))
        assert refused.status_code == 409, refused.text
        assert "has used its storage quota" in refused.json()["detail"] and "storage" in refused.json()
    assert _job(client, key, failed)["state"] == "FAILED"


def test_an_audit_needs_room_in_the_queue(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker,
    app: FastAPI, settings: Settings,
) -> None:  # fmt: skip
    job_id = _succeeded(client, team_key, engine, fake_ray, fake_tracker)
    app.state.settings = settings.model_copy(update={"max_queued_jobs_per_team": 1})
    submit(client, team_key, spec(seeds=[2]))
    full = client.post(f"/api/v1/jobs/{job_id}/audits", headers=auth(team_key))
    assert full.status_code == 429 and full.headers["Retry-After"] == "2"


def test_the_pool_is_read_at_the_first_submission(client: TestClient, db: Database) -> None:
    """No engine round has run: the submission reads the pool itself (8 CPUs) and refuses what no node
    could hold, instead of queueing it for ever ("pool too small")."""
    key = make_team(db, "bravo", cpu_quota=512)
    refused = client.post("/api/v1/jobs", json=spec(resources={"cpus": 256}), headers=auth(key))
    assert refused.status_code == 422 and refused.json()["field"] == "resources.cpus", refused.text
    assert "exceed the pool of 8" in refused.json()["detail"]


def test_before_the_pool_is_read_the_largest_declared_node_decides(
    client: TestClient, db: Database, fake_ray: FakeRay, app: FastAPI, settings: Settings
) -> None:
    key = make_team(db, "bravo", cpu_quota=512, gpu_quota=4)
    fake_ray.down = True  # Ray cannot tell yet (a fresh head lists no node): nothing declared, nothing fits
    for body in (spec(resources={"cpus": 256}), spec()):
        for dry_run in ("false", "true"):
            waiting = client.post("/api/v1/jobs", params={"dry_run": dry_run}, json=body, headers=auth(key))
            assert waiting.status_code == 503 and waiting.json()["field"] == "resources.cpus", waiting.text
            assert waiting.headers["Retry-After"] == "2" and "SMARTUNE_LARGEST_NODE_CPUS" in waiting.text
    app.state.settings = settings.model_copy(update={"largest_node_cpus": 8.0, "largest_node_gpus": 2.0})
    assert submit(client, key, spec(resources={"cpus": 8, "gpus": 2}))["state"] == "QUEUED"
    for kind, too_big in (("cpus", 9), ("gpus", 3)):
        waiting = client.post("/api/v1/jobs", json=spec(resources={kind: too_big}), headers=auth(key))
        assert waiting.status_code == 503 and waiting.json()["field"] == f"resources.{kind}"
        assert "the largest node this deployment declares has" in waiting.json()["detail"]
    assert client.get("/api/v1/jobs", headers=auth(key)).json()["count"] == 1
    fake_ray.down = False  # read now: the pool of 8 CPUs says no for good
    refused = client.post("/api/v1/jobs", json=spec(resources={"cpus": 256}), headers=auth(key))
    assert refused.status_code == 422 and "exceed the pool of 8" in refused.json()["detail"]


def test_a_submission_asks_ray_at_most_once_per_ttl_while_it_fails(
    db: Database, fake_ray: FakeRay, fake_tracker: FakeTracker, settings: Settings
) -> None:
    engine = Engine(
        db=db, ray=fake_ray, tracker=fake_tracker, settings=settings.model_copy(update={"capacity_ttl_s": 60})
    )
    fake_ray.down = True
    engine.tick()  # the round's read fails
    fake_ray.down = False
    assert engine.known_capacity() is None  # not asked again within the TTL: the declared node decides
    engine.tick()  # the rounds keep trying while the pool was never read
    assert engine.known_capacity() == Resources(8.0, 2.0)


def test_a_standby_replica_reads_the_pool_its_submissions_are_judged_by(
    client: TestClient, engine: Engine, db: Database, fake_ray: FakeRay, fake_tracker: FakeTracker,
    settings: Settings,
) -> None:  # fmt: skip
    engine.tick()  # the first engine holds the lease
    replica = Engine(db=db, ray=fake_ray, tracker=fake_tracker, settings=settings)
    fake_ray.cpus = 16  # an autoscaler added a node
    replica.tick()
    assert not replica.leading and replica.capacity == Resources(16.0, 2.0)


def test_the_embedded_head_declares_its_own_size() -> None:
    assert local_head.declared_size(4, 2) == {"largest_node_cpus": 4.0, "largest_node_gpus": 2.0}
    detected = local_head.declared_size(None, None)
    assert detected["largest_node_cpus"] >= 1 and "largest_node_gpus" not in detected  # Ray finds GPUs itself
    assert local_head.declared_size(4, 2, "--num-cpus=8 --num-gpus=1") == {}  # the flags given win: no guess


def test_the_largest_node_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SMARTUNE_LARGEST_NODE_CPUS", "96")
    monkeypatch.setenv("SMARTUNE_LARGEST_NODE_GPUS", "8")
    settings = Settings()
    assert (settings.largest_node_cpus, settings.largest_node_gpus) == (96.0, 8.0)
