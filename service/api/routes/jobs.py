"""Jobs: submit a sweep, list and read jobs, cancel one, read its logs and its results.

Reads are `async def`: a few indexed queries on the event loop cost less than a hop to the thread pool
(SQLite readers never wait in WAL mode). Writes run whole through the `Writer` (see service.api.deps);
calls to Ray run in the thread pool.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse

from service import crud
from service import jobs as job_ops
from service.api.deps import (
    CurrentKey,
    EngineDep,
    RayJobsDep,
    SessionDep,
    SettingsDep,
    TeamKey,
    WriterDep,
    WriteSessionDep,
)
from service.api.examples import SPEC_EXAMPLES
from service.api.views import job_detail, job_public
from service.errors import ApiError, not_found
from service.models import Job, JobState, Team
from service.ray_jobs import RayUnavailable
from service.schemas import ErrorBody, JobDetail, JobPublic, JobsPublic, JobSubmitted
from worker.contract.spec import JobSpec

router = APIRouter(prefix="/jobs", tags=["jobs"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing, invalid or revoked key"},
    404: {"model": ErrorBody, "description": "no such job in the caller's team"},
}


def _job(session: SessionDep, key: CurrentKey, job_id: str, *, for_update: bool = False) -> Job:
    job = crud.get_job(session=session, job_id=job_id, team_id=key.scope, for_update=for_update)
    if job is None:
        raise not_found("job", job_id)
    return job


@router.post(
    "",
    status_code=201,
    response_model=JobSubmitted,
    responses={
        **_ERRORS,
        200: {"model": JobSubmitted, "description": "Idempotency-Key replay: the original job"},
        409: {"model": ErrorBody, "description": "Idempotency-Key reused with a different spec"},
        413: {"model": ErrorBody, "description": "body too large"},
        422: {"model": ErrorBody, "description": "invalid spec; `field` names the culprit"},
        429: {"model": ErrorBody, "description": "too many queued jobs for the team"},
    },
)
async def create_job(
    spec: Annotated[JobSpec, Body(openapi_examples=SPEC_EXAMPLES)],
    session: WriteSessionDep,
    key: TeamKey,
    settings: SettingsDep,
    engine: EngineDep,
    writer: WriterDep,
    response: Response,
    idempotency_key: Annotated[str | None, Header(min_length=1, max_length=255)] = None,
) -> JobSubmitted:
    """Submit a job spec (one sweep); it waits in the queue until its team's quota and the pool have room."""

    def submit() -> JobSubmitted:
        team = session.get(Team, key.team_id)
        if team is None:  # deleted after the key was cached
            raise ApiError(403, "this key's team no longer exists")
        job, replayed = job_ops.submit_job(
            session=session, settings=settings, team=team, spec=spec, idempotency_key=idempotency_key
        )
        twins = crud.identical_jobs(
            session=session, team_id=job.team_id, spec_hash=job.spec_hash, exclude=job.id
        )
        return JobSubmitted(**job_public(job, settings).model_dump(), replayed=replayed, identical_jobs=twins)

    submitted = await writer.run(session, submit)
    response.status_code = 200 if submitted.replayed else 201
    if not submitted.replayed:
        engine.wake()
    return submitted


@router.get("", response_model=JobsPublic, responses=_ERRORS)
async def read_jobs(
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
    return JobsPublic(data=[job_public(j, settings) for j in rows], count=count)


@router.get("/{job_id}", response_model=JobDetail, responses=_ERRORS)
async def read_job(job_id: str, session: SessionDep, key: CurrentKey, settings: SettingsDep) -> JobDetail:
    """Read a job: state, timestamps, trials with their best scores, attempts, transitions, MLflow links."""
    return job_detail(session, _job(session, key, job_id), settings)


@router.post(
    "/{job_id}/cancel",
    response_model=JobPublic,
    responses={**_ERRORS, 409: {"model": ErrorBody, "description": "the job has already finished"}},
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
            session=session, job=_job(session, key, job_id, for_update=True), by=key.key_id
        )
        return job_public(job, settings), stop

    cancelled, stop = await writer.run(session, cancel)
    if stop is not None:
        await run_in_threadpool(job_ops.stop_ray_job, ray, stop)
    engine.wake()
    return cancelled


@router.get(
    "/{job_id}/logs",
    response_class=PlainTextResponse,
    responses={**_ERRORS, 503: {"model": ErrorBody, "description": "Ray unreachable"}},
)
def read_job_logs(
    job_id: str,
    session: SessionDep,
    key: CurrentKey,
    ray: RayJobsDep,
    attempt: Annotated[int | None, Query(ge=1, description="default: the latest")] = None,
    tail: Annotated[int | None, Query(ge=1, le=100_000, description="only the last N lines")] = None,
) -> PlainTextResponse:
    """The sweep driver's output, from Ray (empty until the job is dispatched)."""
    job = _job(session, key, job_id)
    number = attempt or job.attempt
    if number == 0:
        return PlainTextResponse("")
    if number > job.attempt:
        raise ApiError(404, f"job {job_id} has no attempt {number}", field="query.attempt")
    try:
        text = ray.logs(f"{job_id}-a{number}")
    except RayUnavailable as err:
        raise ApiError(503, f"Ray is unreachable: {err}") from err
    if text is None:
        raise ApiError(404, f"Ray no longer holds the logs of {job_id}-a{number}")
    return PlainTextResponse("\n".join(text.splitlines()[-tail:]) if tail else text)


@router.get(
    "/{job_id}/results",
    responses={**_ERRORS, 409: {"model": ErrorBody, "description": "the job has not succeeded (yet)"}},
)
async def read_job_results(job_id: str, session: SessionDep, key: CurrentKey) -> dict[str, Any]:
    """The sweep summary (cells with mean and std over seeds, the best trial), once the job has SUCCEEDED."""
    job = _job(session, key, job_id)
    if job.state != JobState.SUCCEEDED:
        raise ApiError(409, f"job {job_id} is {job.state}; results exist once it has SUCCEEDED")
    if job.summary is None:
        raise ApiError(404, f"job {job_id} succeeded but left no summary")
    return dict(job.summary)
