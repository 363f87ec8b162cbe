"""Database operations on a session: keyword-only functions, no FastAPI, no Ray. Callers commit."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session, sessionmaker

from service import security
from service.costs import budget
from service.schemas import TeamCreate, TeamUpdate
from service.store import dashboard_sessions, outbox
from service.store.db import utcnow
from service.store.models import (
    ACTIVE_STATES,
    ApiKey,
    Attempt,
    AttemptState,
    Job,
    JobState,
    Team,
    Transition,
    Trial,
)
from worker.contract.spec import JobSpec

# --- teams and keys ----------------------------------------------------------------------------------


def create_team(*, session: Session, team_in: TeamCreate) -> Team:
    team = Team(**team_in.model_dump())
    session.add(team)
    session.flush()
    return team


def get_team(*, session: Session, name: str) -> Team | None:
    return session.scalar(select(Team).where(Team.name == name))


def list_teams(*, session: Session) -> Sequence[Team]:
    return session.scalars(select(Team).order_by(Team.name)).all()


def update_team(*, session: Session, team: Team, team_in: TeamUpdate) -> Team:
    for name, value in team_in.model_dump(exclude_unset=True).items():
        setattr(team, name, value)
    session.flush()
    return team


def create_api_key(
    *, session: Session, team: Team | None, is_admin: bool = False, name: str | None = None
) -> tuple[ApiKey, str]:
    """A new key row and the key itself (to show once; only its digest is stored)."""
    new = security.generate_key()
    row = ApiKey(key_id=new.key_id, digest=new.digest, team=team, is_admin=is_admin, name=name)
    session.add(row)
    session.flush()
    return row, new.key


def authenticate(*, session: Session, key: str) -> ApiKey | None:
    """The live key row `key` belongs to, or None (unknown, malformed, wrong secret or revoked)."""
    key_id = security.parse_key_id(key)
    row = session.scalar(select(ApiKey).where(ApiKey.key_id == key_id)) if key_id else None
    if not security.verify(key, row.digest if row else None) or row is None:
        return None
    return row if row.revoked_at is None else None


def get_api_key(*, session: Session, key_id: str) -> ApiKey | None:
    return session.scalar(select(ApiKey).where(ApiKey.key_id == key_id))


def list_api_keys(*, session: Session, team: Team) -> Sequence[ApiKey]:
    return session.scalars(select(ApiKey).where(ApiKey.team_id == team.id).order_by(ApiKey.id)).all()


def revoke_api_key(*, session: Session, key: ApiKey) -> ApiKey:
    if key.revoked_at is None:
        key.revoked_at = utcnow()
    dashboard_sessions.end_key_sessions(session=session, key=key)
    session.flush()
    return key


def count_admin_keys(*, session: Session) -> int:
    query = select(func.count()).select_from(ApiKey).where(ApiKey.is_admin, ApiKey.revoked_at.is_(None))
    return session.scalar(query) or 0


# --- jobs ----------------------------------------------------------------------------------------------


def new_job_id() -> str:
    return f"job-{secrets.token_hex(6)}"


def create_job(
    *,
    session: Session,
    team: Team,
    spec: JobSpec,
    n_trials: int,
    idempotency_key: str | None,
    plan: dict[str, Any] | None = None,
    request_hash: str | None = None,
    priority: int | None = None,
    reason: str = "submitted",
) -> Job:
    """Queue a validated spec with its plan (service.costs.estimate) at `priority` (as admitted,
    service.admission; unset: the spec's, else the team's default); `reason` starts its timeline."""
    if priority is None:
        priority = spec.priority if "priority" in spec.model_fields_set else team.default_priority
    job = Job(
        id=new_job_id(),
        team_id=team.id,
        name=spec.name,
        state=JobState.QUEUED,
        priority=priority,
        spec_json=spec.canonical_json(),
        spec_hash=spec.spec_hash(),
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        n_trials=n_trials,
        cpus_per_trial=spec.resources.cpus,
        gpus_per_trial=spec.resources.gpus,
        max_concurrent_trials=spec.limits.max_concurrent_trials,
        cleanup_pending=False,
        attempt=0,
        estimate=plan,
        device_unit=plan["unit"] if plan else None,
        estimated_hours=plan["device_hours"] if plan else None,
    )
    session.add(job)
    record_transition(session=session, job=job, from_state=None, reason=reason)  # one flush for both
    return job


def record_transition(*, session: Session, job: Job, from_state: str | None, reason: str) -> None:
    session.add(
        Transition(
            job_id=job.id, from_state=from_state, to_state=job.state, attempt=job.attempt, reason=reason
        )
    )


def set_state(*, session: Session, job: Job, state: JobState, reason: str) -> None:
    """Move a job to `state` and record the transition (a no-op when it is there already)."""
    if job.state == state:
        return
    before, job.state = job.state, state
    now = utcnow()
    if state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
        job.finished_at = now
        job.wait_reason = None
        budget.record_actual(session, job)  # what its trials held, as synced so far
    if state == JobState.RUNNING and job.started_at is None:
        job.started_at = now
    record_transition(session=session, job=job, from_state=before, reason=reason)
    outbox.job_changed(session, job, before)  # the team's webhooks hear of an end, in this transaction
    session.flush()


def get_job(*, session: Session, job_id: str, team_id: int | None, for_update: bool = False) -> Job | None:
    """The job if it exists and `team_id` may see it (None: any team, for admins and the engine)."""
    query = select(Job).where(Job.id == job_id)
    if team_id is not None:
        query = query.where(Job.team_id == team_id)
    if for_update:
        query = query.with_for_update(of=Job)
    return session.scalar(query)


def get_job_by_idempotency_key(*, session: Session, team_id: int, key: str) -> Job | None:
    return session.scalar(select(Job).where(Job.team_id == team_id, Job.idempotency_key == key))


def list_jobs(
    *,
    session: Session,
    team_id: int | None,
    states: Sequence[str],
    limit: int,
    offset: int,
    text: str | None = None,
) -> tuple[Sequence[Job], int]:
    """A page of jobs, newest first, and the total count matching the filters. `text` matches a part of
    the job's id or name, or its team's name, case-insensitively (`%` and `_` are literal)."""
    where = []
    if team_id is not None:
        where.append(Job.team_id == team_id)
    if states:
        where.append(Job.state.in_(states))
    if text:
        pattern = "%" + text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        team_ids = select(Team.id).where(func.lower(Team.name).like(pattern, escape="\\"))
        where.append(
            or_(
                func.lower(Job.id).like(pattern, escape="\\"),
                func.lower(Job.name).like(pattern, escape="\\"),
                Job.team_id.in_(team_ids),
            )
        )
    count = session.scalar(select(func.count()).select_from(Job).where(*where)) or 0
    query = select(Job).where(*where).order_by(Job.created_at.desc(), Job.id).limit(limit).offset(offset)
    return session.scalars(query).all(), count


def identical_jobs(*, session: Session, team_id: int, spec_hash: str, exclude: str) -> list[str]:
    """Ids of the team's other jobs with the same spec hash, newest first (at most 20)."""
    query = (
        select(Job.id)
        .where(Job.team_id == team_id, Job.spec_hash == spec_hash, Job.id != exclude)
        .order_by(Job.created_at.desc())
        .limit(20)
    )
    return list(session.scalars(query).all())


def count_team_jobs(*, session: Session, team_id: int, states: Sequence[str]) -> int:
    query = select(func.count()).select_from(Job).where(Job.team_id == team_id, Job.state.in_(states))
    return session.scalar(query) or 0


def job_trials(*, session: Session, job_id: str) -> Sequence[Trial]:
    return session.scalars(select(Trial).where(Trial.job_id == job_id).order_by(Trial.trial_id)).all()


def trial_progress(*, session: Session, job_ids: Sequence[str]) -> dict[str, dict[str, int]]:
    """Per job: its trials by state, and `epochs` (the epochs they have finished, summed)."""
    out: dict[str, dict[str, int]] = {job_id: {"epochs": 0} for job_id in job_ids}
    if not job_ids:
        return out
    query = (
        select(Trial.job_id, Trial.state, func.count(), func.coalesce(func.sum(Trial.last_epoch), 0))
        .where(Trial.job_id.in_(job_ids))
        .group_by(Trial.job_id, Trial.state)
    )
    for job_id, state, n, epochs in session.execute(query):
        out[job_id][state] = int(n)
        out[job_id]["epochs"] += int(epochs or 0)
    return out


def recent_transitions(*, session: Session, team_id: int | None, limit: int) -> Sequence[Transition]:
    """The latest job transitions (the scheduler's and the engine's decisions), newest first."""
    query = select(Transition).order_by(Transition.id.desc()).limit(limit)
    if team_id is not None:
        query = query.join(Job, Job.id == Transition.job_id).where(Job.team_id == team_id)
    return session.scalars(query).all()


def job_attempts(*, session: Session, job_id: str) -> Sequence[Attempt]:
    return session.scalars(select(Attempt).where(Attempt.job_id == job_id).order_by(Attempt.number)).all()


def job_transitions(*, session: Session, job_id: str) -> Sequence[Transition]:
    return session.scalars(
        select(Transition).where(Transition.job_id == job_id).order_by(Transition.id)
    ).all()


def active_jobs(*, session: Session) -> Sequence[Job]:
    return session.scalars(select(Job).where(Job.state.in_(ACTIVE_STATES))).all()


def queued_jobs(*, session: Session) -> Sequence[Job]:
    return session.scalars(select(Job).where(Job.state == JobState.QUEUED)).all()


def count_attempts(*, session: Session, job: Job, state: AttemptState) -> int:
    query = select(func.count()).select_from(Attempt).where(Attempt.job_id == job.id, Attempt.state == state)
    return session.scalar(query) or 0


def current_attempt(*, session: Session, job: Job) -> Attempt:
    return session.scalars(
        select(Attempt).where(Attempt.job_id == job.id, Attempt.number == job.attempt)
    ).one()


def update_job_if(
    *,
    sessions: sessionmaker[Session],
    job_id: str,
    check: Callable[[Job], bool],
    change: Callable[[Session, Job], None],
) -> bool:
    """In one write transaction, apply `change` to the job if `check` still holds on the fresh row.

    The engine calls Ray outside any transaction, then records what it learnt only if nobody (a cancel,
    say) changed the job meanwhile.
    """
    with sessions() as session, session.begin():
        job = get_job(session=session, job_id=job_id, team_id=None, for_update=True)
        if job is None or not check(job):
            return False
        change(session, job)
        return True
