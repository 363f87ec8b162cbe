"""A planned stop of the embedded deployment: the jobs its Ray head was running are requeued, not lost.

`smartune serve` stops the local Ray head it started when it exits (and `smartune stop` stops one that a
crashed service left behind). Ray forgets every job with its head, so without a record the next start
would see each running attempt vanish and count it LOST, and `max_attempts` planned restarts would fail
a job that nothing went wrong with. Instead, once the head is down, every active job's attempt is
recorded STOPPED (with why) and the job is QUEUED again; the scheduler dispatches it as its next attempt,
which resumes from Tune's checkpoints. Only LOST attempts count against `max_attempts`.

The head is stopped first and the store written after: a job requeued while its old attempt still ran
could run twice. A crash between the two leaves the attempt to be found LOST on the next start, as any
crash does.
"""

from __future__ import annotations

from sqlalchemy import select

from service.config import Settings
from service.store import crud
from service.store.db import Database, connect, utcnow
from service.store.models import ACTIVE_STATES, AttemptState, Job, JobState

WHY = "the service stopped the Ray head it started (a planned stop)"


def requeue_active(db: Database, *, why: str = WHY) -> list[str]:
    """Record the current attempt of every dispatched or running job STOPPED and queue the job again;
    return the requeued job ids. Idempotent: a second call finds nothing active."""
    requeued: list[str] = []
    with db.write_sessions() as session:
        for job in session.scalars(select(Job).where(Job.state.in_(ACTIVE_STATES)).order_by(Job.id)):
            attempt = crud.current_attempt(session=session, job=job)
            attempt.state, attempt.ended_at, attempt.message = AttemptState.STOPPED, utcnow(), why
            reason = f"{why}; requeued as attempt {job.attempt + 1}, resuming from its checkpoints"
            crud.set_state(session=session, job=job, state=JobState.QUEUED, reason=reason)
            requeued.append(job.id)
        session.commit()
    return requeued


def requeue_in_store(settings: Settings) -> list[str]:
    """`requeue_active` on the deployment's job store, opened for this call alone."""
    db = connect(settings.sqlalchemy_url, timeout_s=settings.db_timeout_s)
    try:
        return requeue_active(db)
    finally:
        db.dispose()
