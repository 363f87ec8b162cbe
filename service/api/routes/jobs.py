"""Jobs: submit a sweep, list and read jobs, cancel or retry one, read its logs and its results.

Nothing here touches the database, Ray or a large spec on the event loop: reads are plain `def` routes
(FastAPI runs them in its thread pool), writes run whole through the `Writer` (service.api.deps), and the
submitted spec is parsed and validated in a worker thread, a few at a time (service.api.spec_body).
A team's key sees its own jobs with error texts cleaned of log tails and server paths; admins see all.
"""

from __future__ import annotations

from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse

from service import jobs as job_ops
from service.api.deps import (
    CurrentKey,
    EngineDep,
    Principal,
    RayJobsDep,
    SessionDep,
    SettingsDep,
    TeamKey,
    WriterDep,
    WriteSessionDep,
)
from service.api.examples import SPEC_EXAMPLES
from service.api.redact import public_audit, public_summary, tenant_logs
from service.api.responses import KEYED, errors
from service.api.spec_body import read_spec
from service.api.views import job_detail, job_public
from service.costs.schemas import JobEstimate
from service.engine.ray_jobs import RayJobError, RayUnavailable
from service.engine.scheduler import Resources
from service.errors import ApiError, not_found
from service.schemas import JobDetail, JobPublic, JobsPublic, JobSubmitted
from service.store import crud
from service.store.models import Job, JobKind, JobState, Team
from worker.contract.spec import JobSpec

router = APIRouter(prefix="/jobs", tags=["jobs"])

NOT_FOUND = {404: "no such job in the caller's team"}
# The request body is read by the route itself (see create_job); this tells the OpenAPI document what it is.
SPEC_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "a job spec (worker.contract.spec.JobSpec)",
        "content": {
            "application/json": {
                "schema": {"$ref": "#/components/schemas/JobSpec"},
                "examples": SPEC_EXAMPLES,
            }
        },
    }
}


def caller_job(session: SessionDep, key: Principal, job_id: str, *, for_update: bool = False) -> Job:
    """The job `job_id` as the caller's key may see it (its team's; any for an admin), else 404."""
    job = crud.get_job(session=session, job_id=job_id, team_id=key.scope, for_update=for_update)
    if job is None:
        raise not_found("job", job_id)
    return job


@router.post(
    "",
    status_code=201,
    response_model=JobSubmitted | JobEstimate,
    openapi_extra=SPEC_BODY,
    responses={
        200: {
            "model": JobSubmitted | JobEstimate,
            "description": "Idempotency-Key replay: the original job; with dry_run=true: the plan",
        },
        **errors(
            400,
            *KEYED,
            403,
            409,
            413,
            415,
            422,
            notes={
                403: "the key belongs to no team (admin keys cannot submit)",
                409: "Idempotency-Key reused with a different spec, or the estimate exceeds what is left of "
                "the team's device-hour budget (`budget`: estimate, used, reserved, budget, left)",
                429: "the key's rate limit (with Retry-After), or the team's queue is full",
                503: "the database is unreachable, or the pool has not been read from Ray yet and a trial is "
                "larger than the largest node the deployment declares; wait `Retry-After` seconds",
            },
        ),
    },
)
async def create_job(
    request: Request,
    session: WriteSessionDep,
    key: TeamKey,
    settings: SettingsDep,
    engine: EngineDep,
    writer: WriterDep,
    response: Response,
    read_session: SessionDep,
    idempotency_key: Annotated[str | None, Header(min_length=1, max_length=255)] = None,
    dry_run: Annotated[
        bool,
        Query(
            description="validate as a submission and return the plan (trials, hours, budget); create nothing"
        ),
    ] = False,
) -> JobSubmitted | JobEstimate:
    """Submit a job spec (one sweep); it waits in the queue until its team's quota and the pool have room.
    Refused (409) when its estimated device-hours exceed what is left of the team's budget."""
    raw = await request.body()
    spec = await anyio.to_thread.run_sync(
        lambda: read_spec(raw, request.headers.get("content-type"), max_cells=settings.max_cells),
        limiter=request.app.state.spec_limiter,
    )
    capacity = await run_in_threadpool(engine.known_capacity)  # read now if never read: a Ray call
    if dry_run:
        response.status_code = 200
        return await run_in_threadpool(_estimate, read_session, key, settings, spec, capacity)

    def submit() -> JobSubmitted:
        team = session.get(Team, key.team_id)
        if team is None:  # deleted after the key was cached
            raise ApiError(403, "this key's team no longer exists")
        job, replayed = job_ops.submit_job(
            session=session,
            settings=settings,
            team=team,
            spec=spec,
            idempotency_key=idempotency_key,
            capacity=capacity,
        )
        twins = crud.identical_jobs(
            session=session, team_id=job.team_id, spec_hash=job.spec_hash, exclude=job.id
        )
        public = job_public(job, settings, admin=key.is_admin)
        return JobSubmitted(**public.model_dump(), replayed=replayed, identical_jobs=twins)

    submitted = await writer.run(session, submit)
    response.status_code = 200 if submitted.replayed else 201
    if not submitted.replayed:
        engine.wake()
    return submitted


def _estimate(
    session: SessionDep, key: TeamKey, settings: SettingsDep, spec: JobSpec, capacity: Resources | None
) -> JobEstimate:
    team = session.get(Team, key.team_id)
    if team is None:  # deleted after the key was cached
        raise ApiError(403, "this key's team no longer exists")
    plan = job_ops.dry_run(session=session, settings=settings, team=team, spec=spec, capacity=capacity)
    return JobEstimate.model_validate(plan)


@router.get("", response_model=JobsPublic, responses=errors(*KEYED, 422))
def read_jobs(
    session: SessionDep,
    key: CurrentKey,
    settings: SettingsDep,
    state: Annotated[list[JobState] | None, Query(description="filter; repeat for several")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
) -> JobsPublic:
    """List the team's jobs, newest first (admins see every team's)."""
    rows, count = crud.list_jobs(
        session=session, team_id=key.scope, states=[s.value for s in state or []], limit=limit, offset=offset
    )
    return JobsPublic(data=[job_public(j, settings, admin=key.is_admin) for j in rows], count=count)


@router.get("/{job_id}", response_model=JobDetail, responses=errors(*KEYED, 404, notes=NOT_FOUND))
def read_job(job_id: str, session: SessionDep, key: CurrentKey, settings: SettingsDep) -> JobDetail:
    """Read a job: state, timestamps, trials with their best scores, attempts, transitions, MLflow links."""
    return job_detail(session, caller_job(session, key, job_id), settings, admin=key.is_admin)


@router.post(
    "/{job_id}/cancel",
    response_model=JobPublic,
    responses=errors(*KEYED, 404, 409, notes={**NOT_FOUND, 409: "the job has already finished"}),
)
async def cancel_job(
    job_id: str,
    session: WriteSessionDep,
    key: CurrentKey,
    ray: RayJobsDep,
    settings: SettingsDep,
    engine: EngineDep,
    writer: WriterDep,
) -> JobPublic:
    """Cancel a job: a queued one leaves the queue, a running one's Ray job is stopped and its runs KILLED."""

    def cancel() -> tuple[JobPublic, str | None]:
        job, stop = job_ops.cancel_job(
            session=session, job=caller_job(session, key, job_id, for_update=True), by=key.key_id
        )
        return job_public(job, settings, admin=key.is_admin), stop

    cancelled, stop = await writer.run(session, cancel)
    if stop is not None:
        await run_in_threadpool(job_ops.stop_ray_job, ray, stop)
    engine.wake()
    return cancelled


RETRY_CONFLICT = (
    "the job is not FAILED, the rest of its estimate exceeds the team's budget, or its trials exceed the "
    "team's quotas as they are now (`field` names the spec's field)"
)


@router.post(
    "/{job_id}/retry",
    response_model=JobPublic,
    responses=errors(*KEYED, 404, 409, 429, notes={**NOT_FOUND, 409: RETRY_CONFLICT, 429: "the team's queue is full"}),
)  # fmt: skip
async def retry_job(
    job_id: str,
    session: WriteSessionDep,
    key: CurrentKey,
    settings: SettingsDep,
    engine: EngineDep,
    writer: WriterDep,
) -> JobPublic:
    """Queue a FAILED job again: its next attempt restores the job's Tune experiment, so finished trials keep
    their results and the others resume from their last checkpoint (the transitions say who retried it).
    It is admitted as a submission is; a priority above the team's maximum now is lowered to it."""
    capacity = await run_in_threadpool(engine.known_capacity)

    def retry() -> JobPublic:
        job = caller_job(session, key, job_id, for_update=True)
        retried = job_ops.retry_job(
            session=session, settings=settings, job=job, by=key.key_id, capacity=capacity
        )
        return job_public(retried, settings, admin=key.is_admin)

    retried = await writer.run(session, retry)
    engine.wake()
    return retried


@router.get(
    "/{job_id}/logs",
    response_class=PlainTextResponse,
    responses=errors(
        *KEYED,
        404,
        422,
        notes={
            404: "no such job, attempt, or logs Ray still holds",
            503: "the database or Ray is unreachable; wait `Retry-After` seconds",
        },
    ),
)
def read_job_logs(
    job_id: str,
    session: SessionDep,
    key: CurrentKey,
    ray: RayJobsDep,
    attempt: Annotated[int | None, Query(ge=1, le=10**6, description="default: the latest")] = None,
    tail: Annotated[int | None, Query(ge=1, le=100_000, description="only the last N lines")] = None,
) -> PlainTextResponse:
    """The sweep driver's output, from Ray (empty until the job is dispatched). A team's key reads it with
    the server's insides scrubbed as in error texts (URIs such as the tracking store's, absolute paths,
    node addresses); an admin reads it as it is."""
    job = caller_job(session, key, job_id)
    number = attempt or job.attempt
    if number == 0:
        return PlainTextResponse("")
    if number > job.attempt:
        raise ApiError(404, f"job {job_id} has no attempt {number}", field="query.attempt")
    try:
        text = ray.logs(f"{job_id}-a{number}")
    except RayUnavailable as err:
        raise ApiError(503, "Ray is unreachable; try again later") from err
    except RayJobError as err:  # neither the logs nor a 404 from Ray: not the caller's fault
        raise ApiError(503, "Ray could not give the logs now; try again later") from err
    if text is None:
        raise ApiError(404, f"Ray no longer holds the logs of {job_id}-a{number}")
    text = "\n".join(text.splitlines()[-tail:]) if tail else text
    return PlainTextResponse(text if key.is_admin else tenant_logs(text))


@router.get(
    "/{job_id}/results",
    responses=errors(
        *KEYED,
        404,
        409,
        notes={**NOT_FOUND, 409: "the job has not succeeded (yet), or its summary is not read yet"},
    ),
)
def read_job_results(job_id: str, session: SessionDep, key: CurrentKey) -> dict[str, Any]:
    """The sweep summary (cells with mean and std over seeds, the best trial with its run id, the registered
    model; for a multitask job each task's best and registered model under `tasks`), once the job has
    SUCCEEDED; without the tracking URI or checkpoint locations (server-side paths). For an audit: its
    report (a verdict per trial, each metric recorded vs re-run, each provenance field then vs now)."""
    job = caller_job(session, key, job_id)
    if job.state != JobState.SUCCEEDED:
        raise ApiError(409, f"job {job_id} is {job.state}; results exist once it has SUCCEEDED")
    # The engine reads the summary again until MLflow gives it: the job exists, its results not yet.
    if job.summary is None:
        raise ApiError(409, f"job {job_id} has SUCCEEDED; its summary is not read yet, try again later")
    return public_audit(job.summary) if job.kind == JobKind.AUDIT else public_summary(job.summary)
