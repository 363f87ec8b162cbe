"""The dashboard's pages and forms under /ui: thin routes over service.dashboard.views and the same job
operations the REST routes use (service.jobs: submit, cancel). Reads are plain `def` (thread pool);
forms are read on the loop (small, urlencoded) and do their database work through the `Writer`.

Every page needs a signed-in viewer (a 303 to the login page otherwise); every POST needs the viewer's
CSRF token and a same-site Origin.
"""

from __future__ import annotations

import secrets
from typing import Annotated
from urllib.parse import parse_qs

import anyio.to_thread
from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from service import audits
from service import jobs as job_ops
from service.api.deps import EngineDep, RayJobsDep, SessionDep, SettingsDep, WriterDep, WriteSessionDep
from service.api.routes import pool as pool_routes
from service.api.spec_body import read_spec
from service.dashboard import auth, memory, views
from service.dashboard.auth import Viewer
from service.dashboard.render import render
from service.errors import ApiError
from service.schemas import AuditRequest
from service.store.models import JobKind, JobState, Team

router = APIRouter(prefix="/ui", include_in_schema=False)

MAX_FORM_BYTES = 8192
MAX_TEXT = 200


def page_viewer(request: Request, session: SessionDep) -> Viewer:
    viewer = auth.viewer_of(request, session)
    if viewer is None:
        raise auth.login_redirect(request)
    return viewer


PageViewer = Annotated[Viewer, Depends(page_viewer)]


async def read_form(request: Request) -> dict[str, str]:
    """A small urlencoded form as name -> first value (415 for another body, 400 when unreadable)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise ApiError(415, "send the form as application/x-www-form-urlencoded")
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise ApiError(413, f"a dashboard form is at most {MAX_FORM_BYTES} bytes")
    try:
        fields = parse_qs(
            body.decode("utf-8"), keep_blank_values=True, max_num_fields=16, strict_parsing=False
        )
    except (UnicodeDecodeError, ValueError) as err:
        raise ApiError(400, "the form could not be read") from err
    return {name: values[0] for name, values in fields.items()}


def see_other(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


@router.get("")
@router.get("/")
def read_root() -> RedirectResponse:
    return see_other("/ui/jobs")


@router.get("/login")
def read_login(
    request: Request, session: SessionDep, settings: SettingsDep, next: str | None = None
) -> Response:
    """The login form (or straight on, when already signed in)."""
    if auth.viewer_of(request, session) is not None:
        return see_other(auth.safe_next(next))
    response = HTMLResponse("")
    csrf = auth.start_login(request, response, settings)
    page = render(request, "login.html", {"csrf": csrf, "next": auth.safe_next(next), "error": None})
    page.raw_headers.extend(h for h in response.raw_headers if h[0] == b"set-cookie")
    return page


@router.post("/login")
async def create_login(
    request: Request, session: WriteSessionDep, settings: SettingsDep, writer: WriterDep
) -> Response:
    """Exchange an API key for a session (a row of the store) and its cookie."""
    form = await read_form(request)
    auth.check_login_csrf(request, form.get("csrf"))
    limiter = request.app.state.rate_limiter
    if (wait := limiter.acquire(f"login:{request.client.host if request.client else 'unknown'}")) > 0:
        raise ApiError(
            429, "too many sign-in attempts; wait a little", headers={"Retry-After": str(int(wait) + 1)}
        )
    key = form.get("key", "").strip()
    ttl_s = settings.dashboard_session_ttl_s
    token = await writer.run(session, lambda: auth.sign_in(session, key, ttl_s)) if key else None
    target = auth.safe_next(form.get("next"))
    if token is None:
        response = HTMLResponse("")
        csrf = auth.start_login(request, response, settings)
        error = "That key is unknown, malformed or revoked." if key else "Paste an API key."
        page = render(request, "login.html", {"csrf": csrf, "next": target, "error": error}, status_code=401)
        page.raw_headers.extend(h for h in response.raw_headers if h[0] == b"set-cookie")
        return page
    redirect = see_other(target)
    auth.set_session_cookie(request, redirect, settings, token)
    return redirect


@router.post("/logout")
async def delete_login(
    request: Request, viewer: PageViewer, session: WriteSessionDep, writer: WriterDep
) -> Response:
    """End the session: its row is deleted, so the cookie (even a saved copy) opens nothing any more; the
    key itself stays valid."""
    form = await read_form(request)
    auth.check_csrf(request, viewer, form.get("csrf"))
    await writer.run(session, lambda: auth.sign_out(session, viewer))
    redirect = see_other("/ui/login")
    auth.drop_session_cookie(redirect)
    return redirect


@router.get("/jobs")
def read_jobs_page(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: PageViewer,
    state: Annotated[list[JobState] | None, Query()] = None,
    q: Annotated[str | None, Query(max_length=MAX_TEXT)] = None,
    page: Annotated[int, Query(ge=1, le=10**6)] = 1,
) -> HTMLResponse:
    """The jobs list: filters, pagination, live state and progress."""
    states = [s.value for s in state or []]
    data = views.jobs_page(session, settings, viewer.principal, states=states, text=q, page=page)
    return render(request, "jobs.html", {"viewer": viewer, "all_states": views.STATES, **data})


@router.get("/jobs/{job_id}")
def read_job_page(
    request: Request, job_id: str, session: SessionDep, settings: SettingsDep, viewer: PageViewer
) -> HTMLResponse:
    """A job: state and timeline, spec, charts, the best configuration, actions."""
    job = views.load_job(session, viewer.principal, job_id)
    if job.kind == JobKind.AUDIT:
        return render(
            request,
            "audit.html",
            {"viewer": viewer, **views.audit_page(session, settings, viewer.principal, job)},
        )
    data = views.job_page(session, settings, viewer.principal, job)
    context = {"viewer": viewer, "form_token": secrets.token_urlsafe(12), **data}
    return render(request, "job.html", context, webgl=True)


@router.post("/jobs/{job_id}/audit")
async def audit_job(
    request: Request,
    job_id: str,
    session: WriteSessionDep,
    viewer: PageViewer,
    settings: SettingsDep,
    engine: EngineDep,
    writer: WriterDep,
) -> Response:
    """Queue an audit of the job's best trial (service.audits.submit_audit, as `POST
    /api/v1/jobs/{id}/audits`) and show it."""
    form = await read_form(request)
    auth.check_csrf(request, viewer, form.get("csrf"))
    capacity = await run_in_threadpool(engine.known_capacity)

    def submit() -> str:
        job = views.load_job(session, viewer.principal, job_id)
        return audits.submit_audit(
            session=session, settings=settings, job=job, request=AuditRequest(), capacity=capacity
        ).id

    audit_id = await writer.run(session, submit)
    engine.wake()
    return see_other(f"/ui/jobs/{audit_id}")


@router.post("/jobs/{job_id}/resubmit")
async def resubmit_job(
    request: Request,
    job_id: str,
    session: WriteSessionDep,
    viewer: PageViewer,
    settings: SettingsDep,
    engine: EngineDep,
    writer: WriterDep,
) -> Response:
    """Submit the job's spec again as a new job (service.jobs.submit_job, as `POST /api/v1/jobs`); the
    form's one-time token is its Idempotency-Key, so a double click queues one job."""
    form = await read_form(request)
    auth.check_csrf(request, viewer, form.get("csrf"))
    token = form.get("token", "")
    if not 8 <= len(token) <= 64:
        raise ApiError(422, "the form's token is missing; reload the page", field="token")
    principal = viewer.principal
    if principal.team_id is None:
        raise ApiError(403, "this key belongs to no team; sign in with a team's key to submit")
    job = await run_in_threadpool(views.load_job, session, principal, job_id)
    spec_json = job.spec_json.encode()
    session.close()
    spec = await anyio.to_thread.run_sync(
        lambda: read_spec(spec_json, "application/json", max_cells=settings.max_cells),
        limiter=request.app.state.spec_limiter,
    )
    capacity = await run_in_threadpool(engine.known_capacity)

    def submit() -> str:
        team = session.get(Team, principal.team_id)
        if team is None:
            raise ApiError(403, "this key's team no longer exists")
        new, _replayed = job_ops.submit_job(
            session=session,
            settings=settings,
            team=team,
            spec=spec,
            idempotency_key=f"dashboard-resubmit-{token}",
            capacity=capacity,
        )
        return new.id

    new_id = await writer.run(session, submit)
    engine.wake()
    return see_other(f"/ui/jobs/{new_id}")


@router.get("/pool")
def read_pool_page(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    engine: EngineDep,
    ray: RayJobsDep,
    viewer: PageViewer,
) -> HTMLResponse:
    """The pool: capacity, GPU memory and its packing, usage by team against quotas, the queue with
    reasons, recent decisions."""
    key = viewer.principal
    pool = pool_routes.read_pool(session=session, key=key, engine=engine, settings=settings)
    queue = pool_routes.read_queue(session=session, key=key, engine=engine, settings=settings)
    gpu_memory = memory.memory_section(session, key, memory.ray_nodes(ray))
    context = {
        "viewer": viewer,
        "pool": pool,
        "queue": queue,
        "memory": gpu_memory,
        **views.pool_page(session, key),
    }
    return render(request, "pool.html", context)


@router.get("/compare")
def read_compare_page(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: PageViewer,
    job: Annotated[str, Query(min_length=1, max_length=40)],
    trial: Annotated[list[str], Query(max_length=128)],
) -> HTMLResponse:
    """2-5 trials of a job: their curves on one chart, their parameters side by side."""
    found = views.load_job(session, viewer.principal, job)
    data = views.compare_page(session, settings, viewer.principal, found, trial)
    return render(request, "compare.html", {"viewer": viewer, **data})
