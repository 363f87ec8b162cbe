"""Job operations behind the routes that need more than one crud call: submit (idempotent), cancel, retry.

Submission validates against the deployment (service.validation), admits the job as retries and audits are
(service.admission: priority, quotas, the pool, the budget, the queue), honours `Idempotency-Key` (the same
key returns the original job; the same key with a different spec is a 409) and queues the job. Cancelling a
dispatched job stops its Ray job at once; the engine then ends its MLflow runs as KILLED. Retrying a
FAILED job queues it again as its next attempt, which resumes from its Tune checkpoints: its finished
trials are not run again.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service import admission, validation
from service.config import Settings
from service.costs import calibration, estimate, memory
from service.datasets import ops as datasets
from service.engine import pool
from service.engine.autoscaler import Autoscaler
from service.engine.ray_jobs import RayJobs, RayUnavailable
from service.engine.scheduler import Resources
from service.errors import ApiError
from service.store import crud
from service.store.models import ACTIVE_STATES, FINAL_STATES, Job, JobState, Team
from worker.contract.spec import JobSpec

logger = logging.getLogger(__name__)


def _replay(job: Job, request_hash: str) -> Job:
    """The earlier job of an Idempotency-Key, if its spec is the one sent again. Compared as sent, before
    pinning: a dataset version published or a memory estimate refreshed in between changes the pinned spec,
    not the request. The stored (pinned) spec matches too: jobs stored before `request_hash` existed, or a
    client sending back the spec it was shown."""
    if request_hash not in (job.request_hash, job.spec_hash):
        raise ApiError(
            409,
            f"Idempotency-Key was used for job {job.id} with a different spec",
            field="header.idempotency-key",
        )
    return job


def _pinned(session: Session, settings: Settings, team: Team, spec: JobSpec) -> JobSpec:
    """The spec as stored: `dataset:NAME` pinned to its digest, GPU trials to their memory estimate and the
    GPU fraction it packs to (service.costs.memory.pin), both decided now, at submission."""
    spec = datasets.pin(session=session, team=team, spec=spec)
    return memory.pin(spec, gpu_kind=settings.gpu_kind, table=memory.load(session))


def _spec_ask(spec: JobSpec, team: Team, n_trials: int, plan: dict[str, Any]) -> admission.Ask:
    """What a submitted spec asks: its priority if it sets one (else the team's default), its plan's hours."""
    explicit = "priority" in spec.model_fields_set
    return admission.Ask(
        priority=spec.priority if explicit else team.default_priority,
        explicit_priority=explicit,
        cpus=spec.resources.cpus,
        gpus=spec.resources.gpus,
        max_concurrent=spec.limits.max_concurrent_trials,
        n_trials=n_trials,
        unit=plan["unit"],
        device_hours=plan["device_hours"],
        from_spec=True,
    )


def submit_job(
    *,
    session: Session,
    settings: Settings,
    team: Team,
    spec: JobSpec,
    idempotency_key: str | None,
    capacity: Resources | None = None,
) -> tuple[Job, bool]:
    """Queue `spec` for `team`; return the job and whether it is an earlier submission replayed."""
    request_hash = spec.spec_hash()  # as sent: what a replay of this request is compared with
    if idempotency_key is not None:
        earlier = crud.get_job_by_idempotency_key(session=session, team_id=team.id, key=idempotency_key)
        if earlier is not None:
            return _replay(earlier, request_hash), True
    spec = _pinned(session, settings, team, spec)
    n_trials = validation.check_spec(spec, settings=settings, team=team)
    plan = cost_plan(session=session, settings=settings, team=team, spec=spec, capacity=capacity)
    admitted = admission.admit(
        session, settings, team, _spec_ask(spec, team, n_trials, plan), capacity=capacity
    )
    plan["budget"] = admitted.budget
    try:
        job = crud.create_job(
            session=session,
            team=team,
            spec=spec,
            n_trials=n_trials,
            idempotency_key=idempotency_key,
            plan=plan,
            request_hash=request_hash,
            priority=admitted.priority,
            reason="submitted" + (f"; {admitted.note}" if admitted.note else ""),
        )
        session.commit()
    except IntegrityError:  # a concurrent request with the same key won the race
        session.rollback()
        if idempotency_key is None:
            raise
        earlier = crud.get_job_by_idempotency_key(session=session, team_id=team.id, key=idempotency_key)
        if earlier is None:
            raise
        return _replay(earlier, request_hash), True
    return job, False


def cost_plan(
    *, session: Session, settings: Settings, team: Team, spec: JobSpec, capacity: Resources | None
) -> dict[str, Any]:
    """The spec's plan (service.costs.estimate) with this deployment's calibration, on the pool's reach (with
    an autoscaler, what it may add counts: service.engine.autoscaler)."""
    table = calibration.load(session)
    capacity = pool.reach(capacity, Autoscaler.of(settings.autoscaled_node_types))
    uploaded = datasets.uploaded_rows(session=session, team=team, spec=spec)
    return estimate.plan(spec, settings=settings, team=team, calibration=table, capacity=capacity,
                         memory_table=memory.load(session), uploaded=uploaded)  # fmt: skip


def dry_run(
    *, session: Session, settings: Settings, team: Team, spec: JobSpec, capacity: Resources | None = None
) -> dict[str, Any]:
    """What a submission of `spec` would be told, and its plan; nothing is created. A budget it would
    exceed, or a storage quota the team has used up, is reported in the plan (`budget` / `storage`: `fits`
    false, `refusal`), not raised."""
    spec = _pinned(session, settings, team, spec)
    n_trials = validation.check_spec(spec, settings=settings, team=team)
    plan = cost_plan(session=session, settings=settings, team=team, spec=spec, capacity=capacity)
    ask = _spec_ask(spec, team, n_trials, plan)
    admitted = admission.admit(session, settings, team, ask, capacity=capacity, dry_run=True)
    plan["budget"], plan["storage"] = admitted.budget, admitted.storage
    return {"dry_run": True, **plan}


def cancel_job(*, session: Session, job: Job, by: str) -> tuple[Job, str | None]:
    """Cancel a queued or active job (idempotent for a cancelled one; 409 for other finished ones).

    Returns the job and, when it was dispatched, the Ray submission to stop (`stop_ray_job`, after the
    commit: the engine stops it anyway, and ends its MLflow runs, if Ray cannot be reached now).
    """
    if job.state in FINAL_STATES:
        if job.state == JobState.CANCELLED:
            return job, None
        raise ApiError(409, f"job {job.id} has already finished ({job.state})", field=None)
    was_active = job.state in ACTIVE_STATES
    crud.set_state(session=session, job=job, state=JobState.CANCELLED, reason=f"cancelled by key {by}")
    job.cleanup_pending = was_active
    session.commit()
    return job, job.submission_id if was_active else None


def stop_ray_job(ray: RayJobs, submission_id: str) -> None:
    try:
        ray.stop(submission_id)
    except RayUnavailable as err:  # the engine stops it once Ray answers again
        logger.warning("cancel %s: %s", submission_id, err)


def retry_job(
    *, session: Session, settings: Settings, job: Job, by: str, capacity: Resources | None = None
) -> Job:
    """Queue a FAILED job again (409 for any other state): the next attempt restores the job's Tune
    experiment, so finished trials keep their results and the others resume from their last checkpoint.
    It is admitted as a submission is (service.admission): the rest of its estimate must fit the team's
    budget (409), its trials the team's quotas as they are now (409), its queue (429); a priority above
    the team's maximum now is lowered to it, and the timeline says so."""
    if job.state != JobState.FAILED:
        hint = "; submit its spec again instead" if job.state == JobState.CANCELLED else ""
        raise ApiError(
            409, f"only a FAILED job can be retried; job {job.id} is {job.state}{hint}", field=None
        )
    team = job.team
    left_to_run = None
    if job.estimated_hours is not None:
        left_to_run = max(0.0, job.estimated_hours - (job.actual_hours or 0.0))
    admitted = admission.admit(
        session, settings, team, admission.stored_ask(job, left_to_run), capacity=capacity
    )
    failure = job.message
    job.message = job.summary = job.finished_at = job.actual_hours = None
    job.summary_pending = False  # its queued_at stays: it takes its place again, as a requeued attempt does
    job.priority = admitted.priority
    # The note goes first: the failure may run over several lines, of which a team's key sees the first.
    retried = f"retried by key {by}" + (f", {admitted.note}," if admitted.note else "")
    reason = f"{retried} after: {failure or 'a failure'}"[:900]
    reason = f"{reason}; attempt {job.attempt + 1} resumes from its checkpoints"
    crud.set_state(session=session, job=job, state=JobState.QUEUED, reason=reason)
    session.commit()
    return job
