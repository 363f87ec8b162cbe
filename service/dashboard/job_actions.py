"""The job page's state-changing buttons beside re-submit: cancel a job and retry a FAILED one, each a thin
form route over the job operation its REST twin uses (service.jobs), with the viewer's CSRF token."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from service import jobs as job_ops
from service.api.deps import EngineDep, RayJobsDep, SettingsDep, WriterDep, WriteSessionDep
from service.dashboard import auth, views
from service.dashboard.routes import PageViewer, read_form, see_other

router = APIRouter(prefix="/ui", include_in_schema=False)


@router.post("/jobs/{job_id}/cancel")
async def cancel_job(
    request: Request,
    job_id: str,
    session: WriteSessionDep,
    viewer: PageViewer,
    ray: RayJobsDep,
    engine: EngineDep,
    writer: WriterDep,
) -> Response:
    """Cancel the job (service.jobs.cancel_job, as `POST /api/v1/jobs/{id}/cancel`)."""
    form = await read_form(request)
    auth.check_csrf(request, viewer, form.get("csrf"))

    def cancel() -> str | None:
        job = views.load_job(session, viewer.principal, job_id)
        _job, stop = job_ops.cancel_job(session=session, job=job, by=viewer.principal.key_id)
        return stop

    stop = await writer.run(session, cancel)
    if stop is not None:
        await run_in_threadpool(job_ops.stop_ray_job, ray, stop)
    engine.wake()
    return see_other(f"/ui/jobs/{job_id}")


@router.post("/jobs/{job_id}/retry")
async def retry_job(
    request: Request,
    job_id: str,
    session: WriteSessionDep,
    viewer: PageViewer,
    settings: SettingsDep,
    engine: EngineDep,
    writer: WriterDep,
) -> Response:
    """Queue a FAILED job again (service.jobs.retry_job, as `POST /api/v1/jobs/{id}/retry`): its next
    attempt resumes from its checkpoints. A refusal (not FAILED, over budget, queue full) is an error page."""
    form = await read_form(request)
    auth.check_csrf(request, viewer, form.get("csrf"))
    capacity = await run_in_threadpool(engine.known_capacity)

    def retry() -> None:
        job = views.load_job(session, viewer.principal, job_id)
        job_ops.retry_job(
            session=session, settings=settings, job=job, by=viewer.principal.key_id, capacity=capacity
        )

    await writer.run(session, retry)
    engine.wake()
    return see_other(f"/ui/jobs/{job_id}")
