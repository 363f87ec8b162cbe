"""A job's logs in the dashboard: the sweep driver's (Ray's log of the job's attempt, followed while the job
runs) and each trial's own output (kept on its MLflow run: worker.tune.trial_output), on one page.

- `GET /ui/jobs/{id}/logs[?trial=T]`: the page (static/dashboard/logs.js polls the data below);
- `GET /ui/data/jobs/{id}/logs?attempt=N&offset=K`: the driver's log from character `offset` of attempt
  N's log on (the latest attempt by default), whole lines only while the job runs, at most `MAX_CHUNK`
  characters (an older part is skipped and said so), and the offset to ask from next time;
- `GET /ui/data/jobs/{id}/trials/{trial}/logs`: the last `TRIAL_TAIL` bytes of what the trial printed.

Terminal colour codes (Ray colours its prefixes) are taken out for the page. Both are read as the REST API's `GET /api/v1/jobs/{id}/logs`: the job through the caller's team (another
team's is a 404), a team's key gets every line scrubbed of the server's insides (service.api.redact:
URIs, absolute paths, node addresses), an admin reads them as they are.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import anyio
import anyio.to_thread
from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse

from service.api.deps import RayJobsDep, SessionDep, SettingsDep
from service.api.redact import tenant_logs
from service.dashboard import views
from service.dashboard.data import DataViewer
from service.dashboard.render import render
from service.dashboard.routes import PageViewer
from service.engine.ray_jobs import RayJobError, RayUnavailable
from service.engine.run_files import TrialOutput
from service.engine.tracking import Tracker
from service.errors import ApiError
from service.store import crud
from service.store.models import FINAL_STATES

router = APIRouter(prefix="/ui", include_in_schema=False)

MAX_CHUNK = 64 * 1024  # characters of the driver's log one answer carries (its newest part)
TRIAL_TAIL = 64 * 1024  # bytes of a trial's output one answer carries (the newest)
TrialId = Annotated[str, Query(max_length=128)]
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # a terminal escape (colour) sequence


def log_chunk(text: str, offset: int, final: bool, max_chars: int = MAX_CHUNK) -> dict[str, Any]:
    """The part of `text` after character `offset`: while the log may grow (`final` false) only up to its
    last line break, so no line is cut; past `max_chars` only the newest lines (`skipped`: characters left
    out). An offset beyond the text (a log that started over) reads it from the start again (`reset`)."""
    reset = offset > len(text)
    start = 0 if reset else offset
    skipped = 0
    if len(text) - start > max_chars:
        cut = len(text) - max_chars
        newline = text.find("\n", cut)
        cut = newline + 1 if 0 <= newline < len(text) - 1 else cut
        skipped, start = cut - start, cut
    end = len(text) if final else text.rfind("\n", start) + 1
    end = max(end, start)
    return {"text": text[start:end], "offset": end, "skipped": skipped, "reset": reset}


def _trial_ids(session: SessionDep, job_id: str) -> list[str]:
    return [t.trial_id for t in crud.job_trials(session=session, job_id=job_id)]


@router.get("/jobs/{job_id}/logs")
def read_logs_page(
    request: Request,
    job_id: str,
    session: SessionDep,
    viewer: PageViewer,
    trial: TrialId | None = None,
    attempt: Annotated[int | None, Query(ge=1, le=10**6)] = None,
) -> HTMLResponse:
    """The driver's log of an attempt (the latest by default), or with `trial` (not empty) the trial's own
    output; followed while the job runs."""
    job = views.load_job(session, viewer.principal, job_id)
    trials = _trial_ids(session, job.id)
    trial = trial or None  # the form's "driver" choice sends `trial=`
    if trial is not None and trial not in trials:
        raise ApiError(404, f"job {job.id} has no trial {trial!r}", field="query.trial")
    if attempt is not None and attempt > job.attempt:
        raise ApiError(404, f"job {job.id} has no attempt {attempt}", field="query.attempt")
    context = {
        "viewer": viewer,
        "job": {"id": job.id, "name": job.name, "state": job.state, "attempt": job.attempt},
        "final": job.state in FINAL_STATES,
        "trials": trials,
        "trial": trial,
        "attempt": attempt,
        "attempts": list(range(job.attempt, 0, -1)),
    }
    return render(request, "logs.html", context)


@router.get("/data/jobs/{job_id}/logs")
def read_driver_log(
    job_id: str,
    session: SessionDep,
    viewer: DataViewer,
    ray: RayJobsDep,
    attempt: Annotated[int | None, Query(ge=1, le=10**6)] = None,
    offset: Annotated[int, Query(ge=0, le=10**12)] = 0,
) -> dict[str, Any]:
    """The driver's log of an attempt from `offset` on (see the module's text)."""
    job = views.load_job(session, viewer.principal, job_id)
    number = attempt or job.attempt
    if number > job.attempt:
        raise ApiError(404, f"job {job.id} has no attempt {number}", field="query.attempt")
    final = job.state in FINAL_STATES or number < job.attempt  # an earlier attempt's log is complete
    session.close()  # Ray may take a while: no connection held meanwhile
    text = ""
    if number:
        try:
            found = ray.logs(f"{job.id}-a{number}")
        except RayUnavailable as err:
            raise ApiError(503, "Ray is unreachable; try again later") from err
        except RayJobError as err:
            raise ApiError(503, "Ray could not give the logs now; try again later") from err
        if found is None:
            raise ApiError(404, f"Ray no longer holds the logs of {job.id}-a{number}")
        text = found
    chunk = log_chunk(text, offset, final)
    shown = chunk["text"] if viewer.principal.is_admin else tenant_logs(chunk["text"])
    chunk["text"] = ANSI.sub("", shown)  # after scrubbing, which reads the text between the codes apart
    return {**chunk, "attempt": number, "final": final}


@router.get("/data/jobs/{job_id}/trials/{trial_id}/logs")
async def read_trial_log(
    request: Request,
    job_id: str,
    trial_id: str,
    session: SessionDep,
    settings: SettingsDep,
    viewer: DataViewer,
) -> dict[str, Any]:
    """The newest `TRIAL_TAIL` bytes of what the trial printed, each start under its own header."""

    def find() -> tuple[str, str | None, bool]:
        job = views.load_job(session, viewer.principal, job_id)
        if trial_id not in _trial_ids(session, job.id):
            raise ApiError(404, f"job {job.id} has no trial {trial_id!r}")
        experiment, final = job.mlflow_experiment, job.state in FINAL_STATES
        session.close()
        return job.id, experiment, final

    found_id, experiment, final = await run_in_threadpool(find)
    tracker: Tracker = request.app.state.tracker
    try:
        with anyio.fail_after(settings.mlflow_timeout_s):
            output: TrialOutput | None = await anyio.to_thread.run_sync(
                lambda: tracker.trial_output(found_id, trial_id, TRIAL_TAIL, experiment),
                abandon_on_cancel=True,
            )
    except Exception as err:  # unreachable, refusing, or too slow: not the caller's fault
        raise ApiError(503, "MLflow could not give the trial's output now; try again later") from err
    if output is None:
        return {"text": "", "starts": [], "truncated": False, "running": False, "final": final}
    text = ANSI.sub("", output.text if viewer.principal.is_admin else tenant_logs(output.text))
    return {
        "text": text,
        "starts": output.starts,
        "truncated": output.truncated,
        "running": output.running,
        "final": final,
    }
