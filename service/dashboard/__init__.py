"""The sweep dashboard: server-rendered pages under /ui, served by the control plane itself, with the same
keys and team isolation as the REST API (docs/dashboard.md).

- `auth`: the signed session cookie an API key is exchanged for, and the CSRF tokens of the forms;
- `views`: what each page shows, as plain functions on a session;
- `charts`: the data behind each chart (downsampled curves, heat map, parallel coordinates);
- `routes` (pages and forms), `job_actions` (cancel, retry) and `data` (the charts' JSON, static files):
  thin routes;
- `logs` (the driver's and each trial's log, followed), `downloads` (a trial's best checkpoint, the job's
  registered model, streamed as tars) and `editor` ("new job from this spec": checked, then submitted);
- `render`: templates, the pages' Content-Security-Policy, static files (Plotly.js from the `plotly`
  package), the HTML error page.

Nothing here imports MLflow, Ray or plotly at import time: curves come through the `Tracker` protocol and
plotly.min.js is located when it is first asked for. May import the REST edge's dependencies and views
(`service.api`), the store, the engine's adapters and the domain modules.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from service import errors
from service.config import Settings
from service.dashboard import auth, charts, data, downloads, editor, job_actions, logs, routes
from service.dashboard.render import render

PAGES = "/ui/"
JSON_PREFIXES = ("/ui/data/", "/ui/static/")


async def _http_error(request: Request, exc: Exception) -> Response:
    """Dashboard pages answer errors as a page (a login redirect as a redirect); the API and the
    dashboard's JSON keep the service's JSON error body (service.errors)."""
    assert isinstance(exc, StarletteHTTPException)
    path = request.url.path
    if not (path.startswith(PAGES) or path == "/ui") or path.startswith(JSON_PREFIXES):
        return await errors._http_handler(request, exc)
    if exc.status_code == 303 and exc.headers and "Location" in exc.headers:
        return RedirectResponse(exc.headers["Location"], status_code=303)
    response = render(
        request, "error.html", {"status": exc.status_code, "detail": exc.detail}, exc.status_code
    )
    for name, value in (exc.headers or {}).items():
        response.headers.setdefault(name, value)
    return response


def install(app: FastAPI, settings: Settings) -> None:
    """Mount the dashboard on `app`: its routes, its signer, its curve cache, its error pages."""
    app.state.dashboard_signer = auth.make_signer(settings)
    app.state.curve_cache = charts.CurveCache()
    app.include_router(routes.router)
    app.include_router(job_actions.router)
    app.include_router(data.router)
    app.include_router(logs.router)
    app.include_router(downloads.router)
    app.include_router(editor.router)
    app.add_exception_handler(StarletteHTTPException, _http_error)


__all__ = ["install"]
