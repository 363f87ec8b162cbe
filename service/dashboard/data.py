"""The JSON behind the dashboard's charts and live cells (/ui/data), and its static files (/ui/static).

Same session cookie as the pages, but a 401 (not a redirect) without one: these are fetched by scripts.
Each answer carries only what a chart draws (service.dashboard.charts); curves are downsampled on the
server. GETs change nothing, so they need no CSRF token; the cookie is SameSite=Strict.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from service.api.deps import SessionDep, SettingsDep
from service.dashboard import auth, charts, views
from service.dashboard.auth import Viewer
from service.dashboard.render import own_asset, plotly_asset, serve
from service.engine.tracking import Tracker
from service.errors import ApiError
from service.store import crud
from service.store.models import FINAL_STATES, JobState

router = APIRouter(prefix="/ui", include_in_schema=False)


def data_viewer(request: Request, session: SessionDep) -> Viewer:
    viewer = auth.viewer_of(request, session)
    if viewer is None:
        raise ApiError(401, "sign in to the dashboard first (/ui/login)")
    return viewer


DataViewer = Annotated[Viewer, Depends(data_viewer)]


def _trials(session: SessionDep, job_id: str) -> list[dict[str, Any]]:
    return [
        {
            "trial_id": t.trial_id,
            "state": t.state,
            "params": t.params or {},
            "best_score": t.best_score,
            "last_epoch": t.last_epoch,
        }
        for t in crud.job_trials(session=session, job_id=job_id)
    ]


@router.get("/data/jobs")
def read_jobs_data(
    session: SessionDep,
    settings: SettingsDep,
    viewer: DataViewer,
    state: Annotated[list[JobState] | None, Query()] = None,
    q: Annotated[str | None, Query(max_length=200)] = None,
    page: Annotated[int, Query(ge=1, le=10**6)] = 1,
) -> dict[str, Any]:
    """The jobs list's rows (the same filters and page as the list), for its live cells."""
    states = [s.value for s in state or []]
    data = views.jobs_page(session, settings, viewer.principal, states=states, text=q, page=page)
    keep = (
        "id",
        "kind",
        "state",
        "best_value",
        "verdict",
        "started_at",
        "finished_at",
        "wait_reason",
        "progress",
    )
    return {"jobs": [{k: j[k] for k in keep} for j in data["jobs"]], "count": data["count"]}


@router.get("/data/jobs/{job_id}/status")
def read_job_status(job_id: str, session: SessionDep, viewer: DataViewer) -> dict[str, Any]:
    """The job's state, wait reason, best value and progress (the page's live header)."""
    job = views.load_job(session, viewer.principal, job_id)
    progress = crud.trial_progress(session=session, job_ids=[job.id])[job.id]
    return {
        "state": job.state,
        "wait_reason": job.wait_reason,
        "best_value": job.best_value,
        "final": job.state in FINAL_STATES,
        "progress": views.progress(job, progress),
    }


@router.get("/data/jobs/{job_id}/curves")
def read_curves(
    request: Request,
    job_id: str,
    session: SessionDep,
    viewer: DataViewer,
    key: Annotated[list[str], Query(max_length=64)],
    max_points: Annotated[int, Query(ge=2, le=2000)] = 200,
    trial: Annotated[list[str] | None, Query(max_length=128)] = None,
) -> dict[str, Any]:
    """Per trial, the history of each metric `key` (step = epoch), at most `max_points` points each."""
    keys = charts.check_keys(key)
    if trial is not None and (len(trial) > 50 or any(len(t) > 128 for t in trial)):
        raise ApiError(422, "at most 50 trial ids of at most 128 characters", field="query.trial")
    job = views.load_job(session, viewer.principal, job_id)
    trials = _trials(session, job.id)
    experiment = job.mlflow_experiment
    session.close()  # the MLflow read may take a while: no connection held meanwhile
    tracker: Tracker = request.app.state.tracker
    curves = request.app.state.curve_cache.get(tracker, job_id, keys, max_points, experiment)
    return charts.curves_payload(curves, trials, keys, set(trial) if trial is not None else None)


@router.get("/data/jobs/{job_id}/heatmap")
def read_heatmap(
    job_id: str,
    session: SessionDep,
    viewer: DataViewer,
    x: Annotated[str, Query(min_length=1, max_length=64)],
    y: Annotated[str, Query(min_length=1, max_length=64)],
) -> dict[str, Any]:
    """Mean, std and n of the best dev score over seeds in each (x, y) cell of two swept axes."""
    job = views.load_job(session, viewer.principal, job_id)
    trials = _trials(session, job.id)
    axes = sorted({k for t in trials for k in t["params"]} - {views.SEED})
    return charts.heatmap(trials, x, y, axes)


@router.get("/data/jobs/{job_id}/parallel")
def read_parallel(job_id: str, session: SessionDep, viewer: DataViewer) -> dict[str, Any]:
    """Parallel coordinates: every hyperparameter of the trials, then the best dev score."""
    job = views.load_job(session, viewer.principal, job_id)
    trials = _trials(session, job.id)
    axes = sorted({k for t in trials for k in t["params"]})
    return charts.parallel(trials, axes, str((job.summary or {}).get("main_metric") or "score"))


@router.get("/static/vendor/plotly.min.js")
def read_plotly(request: Request) -> Response:
    return serve(request, plotly_asset())


@router.get("/static/{name}")
def read_static(request: Request, name: str) -> Response:
    asset = own_asset(name)
    if asset is None:
        raise ApiError(404, f"no static file {name!r}")
    return serve(request, asset)
