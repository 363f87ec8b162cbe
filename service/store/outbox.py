"""The webhook outbox: events written in the transaction that records what they tell, one delivery per
subscribed webhook (docs/webhooks.md).

`crud.set_state` calls `job_changed` at every transition (a job that ended SUCCEEDED, FAILED or CANCELLED,
or was LOST); service.engine.outcomes calls `audit_verdict` when an audit's report is stored;
service.notify.budgets calls `enqueue` for a team's budget thresholds. A team without a webhook for the
event gets no row at all. The engine posts the deliveries later (service.notify.notifier). Plain functions
on a session; the caller commits.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.store.db import utcnow
from service.store.models import Job, JobState
from service.store.webhook_models import DeliveryState, Webhook, WebhookDelivery, WebhookEvent

EventType = Literal[
    "job.succeeded",
    "job.failed",
    "job.lost",
    "job.cancelled",
    "audit.pass",
    "audit.fail",
    "audit.not-comparable",
    "budget.80",
    "budget.100",
]
EVENTS: tuple[str, ...] = get_args(EventType)
JOB_EVENTS: dict[str, str] = {
    JobState.SUCCEEDED: "job.succeeded",
    JobState.FAILED: "job.failed",
    JobState.LOST: "job.lost",
    JobState.CANCELLED: "job.cancelled",
}
DEFAULT_EVENTS: tuple[str, ...] = ("job.succeeded", "job.failed", "job.lost")


def subscribers(session: Session, team_id: int, event_type: str) -> list[Webhook]:
    """The team's webhooks that receive `event_type`."""
    hooks = session.scalars(select(Webhook).where(Webhook.team_id == team_id).order_by(Webhook.id))
    return [hook for hook in hooks if event_type in hook.events]


def enqueue(
    session: Session, *, team_id: int, event_type: str, data: dict[str, Any], dedupe_key: str | None = None
) -> WebhookEvent | None:
    """One event and a PENDING delivery, due now, per subscribed webhook; None (nothing written) when no
    webhook of the team receives `event_type`."""
    hooks = subscribers(session, team_id, event_type)
    if not hooks:
        return None
    event = WebhookEvent(team_id=team_id, type=event_type, payload=data, dedupe_key=dedupe_key)
    session.add(event)
    now = utcnow()
    for hook in hooks:
        session.add(
            WebhookDelivery(
                webhook_id=hook.id, event=event, state=DeliveryState.PENDING, attempts=0, next_attempt_at=now
            )
        )
    return event


def _when(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def job_data(job: Job, before: str | None) -> dict[str, Any]:
    """What a job event tells: the job's identity and state, no message (it may hold a driver's log
    lines: GET /jobs/{id} shows it to the team with the server's insides taken out)."""
    return {
        "job_id": job.id,
        "name": job.name,
        "kind": job.kind,
        "state": job.state,
        "previous_state": before,
        "attempt": job.attempt,
        "n_trials": job.n_trials,
        "best_value": job.best_value,
        "audit_of": job.audit_of,
        "created_at": _when(job.created_at),
        "finished_at": _when(job.finished_at),
    }


def job_changed(session: Session, job: Job, before: str | None) -> None:
    """A transition: a job that ended (SUCCEEDED, FAILED, CANCELLED) or was LOST becomes an event."""
    event_type = JOB_EVENTS.get(job.state)
    if event_type is not None:
        enqueue(session, team_id=job.team_id, event_type=event_type, data=job_data(job, before))


def audit_verdict(session: Session, job: Job, report: dict[str, Any]) -> None:
    """An audit's report was stored: its verdict (PASS, FAIL, NOT-COMPARABLE) becomes an event."""
    verdict = str(report.get("verdict", ""))
    event_type = f"audit.{verdict.lower()}"
    if event_type not in EVENTS:
        return
    trials = [
        {"run_id": t.get("run_id"), "verdict": t.get("verdict")}
        for t in report.get("trials", [])
        if isinstance(t, dict)
    ]
    data = {"audit_id": job.id, "audit_of": job.audit_of, "verdict": verdict, "trials": trials}
    enqueue(session, team_id=job.team_id, event_type=event_type, data=data)
