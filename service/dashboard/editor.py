"""The editor of "new job from this spec": prefilled with a job's spec (YAML), checked on the server and
submitted as `POST /api/v1/jobs` submits.

- `GET /ui/jobs/{id}/new`: the editor, the job's spec as submitted, as YAML (JSON is YAML too);
- `POST /ui/jobs/{id}/new` with `action=check`: the text is read with the contract's YAML 1.2 loader and
  checked exactly as a submission is (service.api.spec_body.read_spec: the JobSpec schema, every field's
  mistake with its did-you-mean hint, worker.contract.hints; then service.jobs.dry_run: this deployment's
  and this team's limits, quotas and budget); the page shows each mistake beside its field, or the plan
  (trials, device-hours, what is left of the budget);
- `action=submit`: the same checks, then service.jobs.submit_job with the form's one-time token as its
  Idempotency-Key (a double click queues one job); on to the new job's page.

A refusal is the editor again with the text kept and the status of the API's answer (422 naming the
field, 409 over budget, 413 too large). Admin keys belong to no team and cannot submit (403, as in the
API); the editor still checks their text against the schema.
"""

from __future__ import annotations

import json
import secrets
from typing import Any
from urllib.parse import parse_qs

import anyio.to_thread
import yaml
from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from sqlalchemy.orm import Session

from service import jobs as job_ops
from service.api.deps import EngineDep, SessionDep, SettingsDep, WriterDep, WriteSessionDep
from service.api.spec_body import read_spec
from service.dashboard import auth, views
from service.dashboard.auth import Viewer
from service.dashboard.render import render
from service.dashboard.routes import PageViewer, see_other
from service.errors import ApiError, field_path
from service.store.models import Team
from worker.contract.spec import JobSpec
from worker.contract.yaml12 import yaml_loader

router = APIRouter(prefix="/ui", include_in_schema=False)

FORM_OVERHEAD = 4096  # bytes of the form beside the spec: its token, CSRF token, action, encoding


def spec_text(text: str) -> bytes:
    """The editor's YAML (or JSON) as the JSON body the API reads; a 422 on the line that does not parse."""
    try:
        doc = yaml.load(text, Loader=yaml_loader())  # noqa: S506 - yaml_loader is PyYAML's SafeLoader
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(err, "problem", None) or "not YAML"
        raise ApiError(422, f"the spec is not valid YAML: {problem}{where}", field="spec") from None
    if not isinstance(doc, dict):
        raise ApiError(422, "the spec must be a mapping of fields (`task: rte`, ...)", field="spec")
    try:
        return json.dumps(doc, allow_nan=False).encode()
    except (TypeError, ValueError) as err:  # a date, a NaN: nothing JSON (and so the API) takes
        raise ApiError(422, f"the spec holds a value JSON cannot carry: {err}", field="spec") from None


def problems(err: Exception) -> list[dict[str, Any]]:
    """Each mistake as {field, message}: a validation error's every entry, an ApiError's one."""
    if isinstance(err, RequestValidationError):
        return [
            {"field": field_path(e.get("loc", ())) or "spec", "message": str(e.get("msg", ""))}
            for e in err.errors()
        ]
    assert isinstance(err, ApiError)
    return [{"field": err.field or "spec", "message": str(err.detail)}]


async def _read_editor(request: Request, limit: int) -> dict[str, str]:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise ApiError(415, "send the form as application/x-www-form-urlencoded")
    body = await request.body()
    if len(body) > limit:
        raise ApiError(413, f"the spec is at most {(limit - FORM_OVERHEAD) // 1024} KiB", field="spec")
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=8)
    except (UnicodeDecodeError, ValueError) as err:
        raise ApiError(400, "the form could not be read") from err
    return {name: values[0] for name, values in fields.items()}


def _page(
    request: Request, viewer: Viewer, job_id: str, text: str, *, status: int = 200, **more: Any
) -> HTMLResponse:
    context = {
        "viewer": viewer,
        "job_id": job_id,
        "text": text,
        "form_token": secrets.token_urlsafe(12),
        "can_submit": viewer.principal.team_id is not None,
        "problems": [],
        "plan": None,
        **more,
    }
    return render(request, "editor.html", context, status_code=status)


@router.get("/jobs/{job_id}/new")
def read_editor(request: Request, job_id: str, session: SessionDep, viewer: PageViewer) -> HTMLResponse:
    """The editor, prefilled with the job's spec as submitted (YAML)."""
    job = views.load_job(session, viewer.principal, job_id)
    text = yaml.safe_dump(json.loads(job.spec_json), sort_keys=False)
    return _page(request, viewer, job.id, text)


@router.post("/jobs/{job_id}/new")
async def check_or_submit(
    request: Request,
    job_id: str,
    session: WriteSessionDep,
    read_session: SessionDep,
    viewer: PageViewer,
    settings: SettingsDep,
    engine: EngineDep,
    writer: WriterDep,
) -> Response:
    """Check the edited spec (`action=check`) or submit it as a new job (`action=submit`)."""
    form = await _read_editor(request, settings.max_spec_bytes * 4 + FORM_OVERHEAD)
    auth.check_csrf(request, viewer, form.get("csrf"))
    job = await run_in_threadpool(views.load_job, read_session, viewer.principal, job_id)
    text, action = form.get("spec", ""), form.get("action", "check")
    if action not in ("check", "submit"):
        raise ApiError(422, "action is `check` or `submit`", field="action")
    principal = viewer.principal
    try:
        raw = spec_text(text)
        spec: JobSpec = await anyio.to_thread.run_sync(
            lambda: read_spec(raw, "application/json", max_cells=settings.max_cells),
            limiter=request.app.state.spec_limiter,
        )
        if principal.team_id is None:
            if action == "submit":
                raise ApiError(403, "this key belongs to no team; sign in with a team's key to submit")
            return _page(request, viewer, job.id, text, checked=True, trials=len(spec.trials()))
        capacity = await run_in_threadpool(engine.known_capacity)
        team_id = principal.team_id

        def team(db: Session) -> Team:
            found = db.get(Team, team_id)
            if found is None:
                raise ApiError(403, "this key's team no longer exists")
            return found

        if action == "check":
            plan = await run_in_threadpool(
                lambda: job_ops.dry_run(
                    session=read_session,
                    settings=settings,
                    team=team(read_session),
                    spec=spec,
                    capacity=capacity,
                )  # fmt: skip
            )
            return _page(request, viewer, job.id, text, checked=True, plan=plan, trials=plan["trials"])
        token = form.get("token", "")
        if not 8 <= len(token) <= 64:
            raise ApiError(422, "the form's token is missing; reload the page", field="token")

        def submit() -> str:
            new, _replayed = job_ops.submit_job(
                session=session, settings=settings, team=team(session), spec=spec,
                idempotency_key=f"dashboard-new-{token}", capacity=capacity,
            )  # fmt: skip
            return new.id

        new_id = await writer.run(session, submit)
    except (RequestValidationError, ApiError) as err:
        status = 422 if isinstance(err, RequestValidationError) else err.status_code
        return _page(request, viewer, job.id, text, status=status, problems=problems(err))
    engine.wake()
    return see_other(f"/ui/jobs/{new_id}")
