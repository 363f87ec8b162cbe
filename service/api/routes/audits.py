"""Audits of a job: re-run its trials (by default the best) from their MLflow records, and list the audits.

Thin routes over service.audits. An audit is a job of kind `audit`: `GET /jobs/{audit id}` shows its
state, `GET /jobs/{audit id}/results` its report once it has SUCCEEDED.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from service import audits
from service.api.deps import CurrentKey, EngineDep, SessionDep, SettingsDep, WriterDep, WriteSessionDep
from service.api.responses import KEYED, errors
from service.api.routes.jobs import NOT_FOUND, caller_job
from service.api.views import job_public
from service.schemas import AuditRequest, AuditsPublic, JobPublic

router = APIRouter(prefix="/jobs", tags=["audits"])


@router.post(
    "/{job_id}/audits",
    status_code=201,
    response_model=JobPublic,
    responses=errors(
        400,
        *KEYED,
        404,
        409,
        413,
        422,
        notes={
            **NOT_FOUND,
            409: "the job has not SUCCEEDED, is an audit itself, has no finished trial or has 50 audits; or "
            "re-running the trials exceeds what is left of the team's budget (`budget`) or its quotas",
            422: "an unknown trial id, or one that finished no epoch (the field names it)",
            429: "the key's rate limit (with Retry-After), or the team's queue is full",
        },
    ),
)
async def create_audit(
    job_id: str,
    session: WriteSessionDep,
    key: CurrentKey,
    settings: SettingsDep,
    engine: EngineDep,
    writer: WriterDep,
    request: AuditRequest | None = None,
) -> JobPublic:
    """Queue an audit (no body: of the best trial): re-run the chosen trials from what their MLflow runs
    recorded and compare every per-epoch metric, exactly on CPU. The audit is a job of kind `audit`:
    it is admitted as a submission is (budget, quotas, queue, priority), waits for the team's quota and the
    pool like any job, and its report is its results."""
    capacity = await run_in_threadpool(engine.known_capacity)

    def submit() -> JobPublic:
        job = caller_job(session, key, job_id, for_update=True)
        audit = audits.submit_audit(
            session=session, settings=settings, job=job, request=request or AuditRequest(), capacity=capacity
        )
        return job_public(audit, settings, admin=key.is_admin)

    created = await writer.run(session, submit)
    engine.wake()
    return created


@router.get("/{job_id}/audits", response_model=AuditsPublic, responses=errors(*KEYED, 404, notes=NOT_FOUND))
def read_audits(job_id: str, session: SessionDep, key: CurrentKey, settings: SettingsDep) -> AuditsPublic:
    """The job's audits, newest first, each with its state (its report: `GET /jobs/{audit id}/results`)."""
    job = caller_job(session, key, job_id)
    rows = audits.list_audits(session=session, job_id=job.id)
    return AuditsPublic(data=[job_public(a, settings, admin=key.is_admin) for a in rows])
