"""Webhook events and deliveries over the fake Ray: a job's end, loss or cancellation, an audit's verdict
and a budget threshold enqueue an event (in the transaction that records them) for the subscribed webhooks
of the team only; the engine posts it signed, to the address it checked again; failed attempts back off
exponentially and honour `next_attempt_at`, then fail; pending deliveries survive a restart."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from service.config import Settings
from service.engine.rounds import Engine
from service.notify import budgets, signing
from service.notify.notifier import Notifier, backoff_s
from service.store import crud, outbox
from service.store.db import Database, utcnow
from service.store.models import JobState
from service.store.webhook_models import WebhookDelivery, WebhookEvent
from tests.service.fakes import FakeRay, FakeTracker, summary_for
from tests.service.utils import auth, make_team, spec, submit
from tests.service.webhook_utils import PUBLIC, Receiver, add, deliver, deliveries

HOUR_S = 3600.0


def _job(client: TestClient, key: str, job_id: str) -> dict[str, Any]:
    return dict(client.get(f"/api/v1/jobs/{job_id}", headers=auth(key)).json())


def _succeed(
    client: TestClient, key: str, engine: Engine, ray: FakeRay, tracker: FakeTracker, **changes: Any
) -> str:
    """A sweep whose two trials each ran an hour on 1 CPU, ended SUCCEEDED (the round delivers)."""
    job_id = submit(client, key, spec(**changes))["id"]
    engine.tick()
    tracker.log_trial(job_id, "t1", "TERMINATED", 0.7, epoch=2, wall_s=HOUR_S)
    tracker.log_trial(job_id, "t2", "TERMINATED", 0.8, epoch=2, wall_s=HOUR_S)
    tracker.summaries[job_id] = summary_for(job_id, 0.8)
    ray.set(f"{job_id}-a1", "SUCCEEDED", logs="done\n")
    engine.tick()
    engine.notifier.drain()
    assert _job(client, key, job_id)["state"] == "SUCCEEDED"
    return job_id


def _events(db: Database) -> list[str]:
    with db.sessions() as session:
        return list(session.scalars(select(WebhookEvent.type).order_by(WebhookEvent.id)))


def _due_now(db: Database) -> None:
    """Time passes: every pending delivery is due."""
    with db.write_sessions() as session, session.begin():
        session.execute(update(WebhookDelivery).values(next_attempt_at=utcnow() - timedelta(seconds=1)))


def test_a_finished_job_is_delivered_signed_to_the_team_s_subscribed_webhooks(
    client: TestClient, team_key: str, other_key: str, engine: Engine, fake_ray: FakeRay,
    fake_tracker: FakeTracker, receiver: Receiver, db: Database,
) -> None:  # fmt: skip
    hook = add(client, team_key, events=["job.succeeded"])
    failures_only = add(client, team_key, url="https://ci.example.com/f", events=["job.failed"])
    theirs = add(client, other_key, url="https://ci.example.com/t", events=["job.succeeded"])
    job_id = _succeed(client, team_key, engine, fake_ray, fake_tracker)

    assert len(receiver.requests) == 1 and _events(db) == ["job.succeeded"]
    request = receiver.requests[0]
    assert request.url.host == PUBLIC and request.url.path == "/smartune"  # to the address checked...
    assert request.headers["host"] == "hooks.example.com"  # ...for the name registered
    assert request.extensions["sni_hostname"] == "hooks.example.com"  # its certificate checked for it too
    assert request.headers["smartune-event"] == "job.succeeded"
    assert signing.verify(hook["secret"], request.content, request.headers["smartune-signature"])
    assert not signing.verify(theirs["secret"], request.content, request.headers["smartune-signature"])
    body = json.loads(request.content)
    assert body["type"] == "job.succeeded" and body["team"] == "nlp" and isinstance(body["id"], int)
    data = body["data"]
    assert data["job_id"] == job_id and data["state"] == "SUCCEEDED" and data["kind"] == "sweep"
    assert data["best_value"] == pytest.approx(0.8) and data["attempt"] == 1 and data["finished_at"]
    assert "message" not in data  # a driver's log lines never travel

    [delivery] = deliveries(client, team_key, hook["id"])
    assert delivery["event"] == "job.succeeded" and delivery["event_id"] == body["id"]
    assert delivery["state"] == "DELIVERED" and delivery["attempts"] == 1 and delivery["last_status"] == 200
    assert delivery["last_error"] is None and delivery["next_attempt_at"] is None
    assert deliveries(client, team_key, failures_only["id"]) == []
    assert deliveries(client, other_key, theirs["id"]) == []
    assert deliver(engine) == 0 and len(receiver.requests) == 1  # delivered once


def test_a_team_without_webhooks_writes_no_event(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker,
    receiver: Receiver, db: Database,
) -> None:  # fmt: skip
    _succeed(client, team_key, engine, fake_ray, fake_tracker)
    assert _events(db) == [] and receiver.requests == []


def test_failed_lost_and_cancelled_jobs_are_events(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, receiver: Receiver, db: Database
) -> None:
    add(client, team_key, events=["job.failed", "job.lost", "job.cancelled"])
    failed, lost = submit(client, team_key)["id"], submit(client, team_key)["id"]
    engine.tick()
    fake_ray.set(f"{failed}-a1", "FAILED", message="a node died")
    engine.tick()
    fake_ray.jobs.pop(f"{lost}-a1")  # Ray forgot it: lost, and requeued as attempt 2
    engine.tick()
    cancelled = submit(client, team_key)["id"]
    assert client.post(f"/api/v1/jobs/{cancelled}/cancel", headers=auth(team_key)).status_code == 200
    deliver(engine)
    told = {b["data"]["job_id"]: b for b in receiver.bodies()}
    assert {job_id: b["type"] for job_id, b in told.items()} == {
        failed: "job.failed",
        lost: "job.lost",
        cancelled: "job.cancelled",
    }
    assert told[lost]["data"]["state"] == "LOST" and told[lost]["data"]["attempt"] == 1
    assert _job(client, team_key, lost)["attempt"] == 2  # the event told of the loss; the job goes on


def test_failed_attempts_back_off_honour_the_next_attempt_time_then_fail(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker,
    receiver: Receiver, settings: Settings, db: Database,
) -> None:  # fmt: skip
    settings.webhook_max_attempts, settings.webhook_backoff_s = 3, 60.0
    hook = add(client, team_key)
    receiver.answers = [500, 503, 500]
    before = utcnow()
    _succeed(client, team_key, engine, fake_ray, fake_tracker)
    [first] = deliveries(client, team_key, hook["id"])
    assert first["state"] == "PENDING" and first["attempts"] == 1
    assert first["last_status"] == 500 and first["last_error"] == "HTTP 500"
    wait = _seconds(first["next_attempt_at"]) - before.timestamp()
    assert 60 <= wait <= 70, wait  # the first backoff
    assert deliver(engine) == 0 and len(receiver.requests) == 1  # not due yet: nothing is sent

    _due_now(db)
    assert deliver(engine) == 1
    [second] = deliveries(client, team_key, hook["id"])
    assert second["attempts"] == 2 and second["last_status"] == 503
    wait = _seconds(second["next_attempt_at"]) - _seconds(second["last_attempt_at"])
    assert wait == pytest.approx(120, abs=1)  # doubled

    _due_now(db)
    deliver(engine)
    [last] = deliveries(client, team_key, hook["id"])
    assert last["state"] == "FAILED" and last["attempts"] == 3 and last["next_attempt_at"] is None
    _due_now(db)
    assert deliver(engine) == 0 and len(receiver.requests) == 3
    assert len({r.content for r in receiver.requests}) == 1  # the same body each time, each signed
    assert all(
        signing.verify(hook["secret"], r.content, r.headers["smartune-signature"]) for r in receiver.requests
    )


def _seconds(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_the_backoff_doubles_up_to_its_cap() -> None:
    assert [backoff_s(n, 1.0, 10.0) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    assert [backoff_s(n, 10.0, 600.0) for n in range(1, 5)] == [10, 20, 40, 80]
    assert backoff_s(3, 0.0, 600.0) == 0


def test_the_address_is_checked_again_at_each_delivery(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker,
    receiver: Receiver,
) -> None:  # fmt: skip
    hook = add(client, team_key)  # hooks.example.com resolved to a public address then
    receiver.names.table["hooks.example.com"] = ["10.0.0.9"]  # its DNS answer changed since
    _succeed(client, team_key, engine, fake_ray, fake_tracker)
    assert receiver.requests == []  # nothing was sent inside
    [delivery] = deliveries(client, team_key, hook["id"])
    assert delivery["state"] == "PENDING" and delivery["attempts"] == 1 and delivery["last_status"] is None
    assert delivery["last_error"].startswith("refused: the host hooks.example.com resolves to 10.0.0.9")


def test_an_attempt_that_gets_no_answer_is_retried(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker,
    receiver: Receiver,
) -> None:  # fmt: skip
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    hook = add(client, team_key)
    engine.notifier.transport = httpx.MockTransport(refuse)
    _succeed(client, team_key, engine, fake_ray, fake_tracker)
    [delivery] = deliveries(client, team_key, hook["id"])
    assert delivery["state"] == "PENDING" and delivery["last_status"] is None
    assert delivery["last_error"] == "ConnectError: connection refused" and delivery["next_attempt_at"]


def test_pending_deliveries_survive_a_restart(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker,
    receiver: Receiver, settings: Settings, db: Database,
) -> None:  # fmt: skip
    hook = add(client, team_key)
    receiver.answers = [500]
    _succeed(client, team_key, engine, fake_ray, fake_tracker)
    engine.stop()  # the control plane stops with the delivery pending
    _due_now(db)
    later = Notifier(
        db=db, settings=settings, resolve=receiver.names, transport=httpx.MockTransport(receiver)
    )
    assert later.tick() == 1
    later.drain()
    later.stop()
    [delivery] = deliveries(client, team_key, hook["id"])
    assert delivery["state"] == "DELIVERED" and delivery["attempts"] == 2 and delivery["last_status"] == 200


def test_a_deleted_webhook_drops_its_pending_deliveries(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker,
    receiver: Receiver, db: Database,
) -> None:  # fmt: skip
    hook = add(client, team_key)
    receiver.answers = [500]
    _succeed(client, team_key, engine, fake_ray, fake_tracker)
    assert client.delete(f"/api/v1/webhooks/{hook['id']}", headers=auth(team_key)).status_code == 200
    _due_now(db)
    assert deliver(engine) == 0 and len(receiver.requests) == 1
    with db.sessions() as session:
        assert session.scalar(select(func.count()).select_from(WebhookDelivery)) == 0


def _report(audit_id: str, job_id: str, verdict: str) -> str:
    trial = {"run_id": f"run-{job_id}-t2", "verdict": verdict, "reason": "a metric differs at epoch 2"}
    return json.dumps({"job_id": audit_id, "audit_of": job_id, "verdict": verdict, "trials": [trial]})


def test_an_audit_verdict_is_an_event(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker,
    receiver: Receiver,
) -> None:  # fmt: skip
    job_id = _succeed(client, team_key, engine, fake_ray, fake_tracker)
    add(client, team_key, events=["audit.pass", "audit.fail"])
    audit_id = client.post(f"/api/v1/jobs/{job_id}/audits", json={}, headers=auth(team_key)).json()["id"]
    engine.tick()
    fake_ray.set(f"{audit_id}-a1", "SUCCEEDED", logs="re-running...\n" + _report(audit_id, job_id, "FAIL"))
    engine.tick()
    engine.notifier.drain()
    [body] = receiver.bodies()
    assert body["type"] == "audit.fail"
    assert body["data"] == {
        "audit_id": audit_id, "audit_of": job_id, "verdict": "FAIL",
        "trials": [{"run_id": f"run-{job_id}-t2", "verdict": "FAIL"}],
    }  # fmt: skip


def test_budget_thresholds_are_told_once_per_period(
    client: TestClient, db: Database, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker,
    receiver: Receiver, settings: Settings,
) -> None:  # fmt: skip
    key = make_team(db, "bravo", cpu_hours_budget=2.5)
    add(client, key, events=["budget.80", "budget.100"])
    _succeed(client, key, engine, fake_ray, fake_tracker)  # 2 of 2.5 CPU-hours: 80%

    def check() -> int:
        with db.write_sessions() as session, session.begin():
            return budgets.check(session, settings)

    assert check() == 1 and check() == 0  # told once
    deliver(engine)
    [body] = receiver.bodies()
    assert body["type"] == "budget.80" and body["team"] == "bravo"
    data = body["data"]
    assert data["unit"] == "cpu-hours" and data["threshold_pct"] == 80 and data["budget"] == 2.5
    assert data["used"] == pytest.approx(2.0) and data["period_days"] == settings.budget_period_days

    _succeed(client, key, engine, fake_ray, fake_tracker)  # 4 CPU-hours: past the budget
    assert check() == 1 and check() == 0
    deliver(engine)
    assert [b["type"] for b in receiver.bodies()] == ["budget.80", "budget.100"]
    later = utcnow() + timedelta(days=settings.budget_period_days + 1)  # a period on, still above 80%?
    with db.write_sessions() as session, session.begin():
        assert budgets.check(session, settings, now=later) == 0  # no: the jobs left the window


def test_events_are_written_with_the_transition_that_tells_them(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, receiver: Receiver, db: Database
) -> None:
    """A transition rolled back takes its event with it: both are written in one transaction."""
    add(client, team_key, events=["job.failed"])
    job_id = submit(client, team_key)["id"]
    with db.write_sessions() as session:
        job = crud.get_job(session=session, job_id=job_id, team_id=None)
        assert job is not None
        crud.set_state(session=session, job=job, state=JobState.FAILED, reason="test")
        assert _events_in(session) == ["job.failed"]
        session.rollback()
    assert _events(db) == []
    assert outbox.EVENTS[:4] == ("job.succeeded", "job.failed", "job.lost", "job.cancelled")


def _events_in(session: Any) -> list[str]:
    return list(session.scalars(select(WebhookEvent.type)))
