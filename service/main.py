"""The FastAPI application: `create_app()` builds it; its lifespan opens the job store, runs the migrations,
bootstraps an admin key on first start (written to a file, never printed), and runs the engine
(scheduler, dispatcher, reconciler) thread. Around the routes: the body size limit, security headers,
CORS only when origins are configured (service.http), and an OpenAPI document that declares what the
routes really answer. Operations: `/metrics` for Prometheus (service.http.metrics, behind an admin key or
the metrics token) and a request id on every request and log record (service.http.logs).

Serve it with `smartune serve`, or `uvicorn --factory service.main:create_app`. Importing this module
changes nothing: no database, no Ray, no migrations.
"""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import anyio
from fastapi import Depends, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse

from service import dashboard, errors
from service.api.deps import KeyCache, Writer
from service.api.main import api_router
from service.api.routes import health, metrics
from service.config import Settings, get_settings
from service.engine.mlflow_teams import TeamAccess, team_access
from service.engine.ray_jobs import JobSubmissionAdapter, RayJobs
from service.engine.rounds import Engine
from service.engine.tracking import MlflowTracker, Tracker
from service.http import metrics as http_metrics
from service.http import openapi
from service.http.headers import CORSMiddleware, SecurityHeadersMiddleware, cors_options, docs_policy
from service.http.logs import RequestIdMiddleware, bind_job_id
from service.http.ratelimit import RateLimiter
from service.limits import BodyLimitMiddleware
from service.store import crud
from service.store.db import Database, connect, migrate
from worker.contract.spec import JobSpec

logger = logging.getLogger(__name__)

API_PREFIX = "/api/v1"
TAGS = [
    {"name": "jobs", "description": "Submit sweeps, follow them, cancel them, read their logs and results."},
    {
        "name": "pool",
        "description": "The shared GPU pool: capacity, usage by team, the queue and its reasons.",
    },
    {
        "name": "datasets",
        "description": "Upload datasets (validated, content-addressed), list, publish, delete.",
    },
    {"name": "webhooks", "description": "Signed POSTs to a team's URLs when its jobs end."},
    {"name": "models", "description": "Registered models: a team's, one per task, with its best version."},
    {"name": "teams", "description": "Teams, quotas and keys (admin keys only)."},
    {"name": "keys", "description": "API keys."},
    {"name": "health", "description": "Liveness and readiness."},
    {"name": "schema", "description": "The job spec's JSON Schema (no key needed)."},
]

DASHBOARD_HOME = "/ui/jobs"  # where `/` sends a browser: the dashboard (its sign-in page first)


def _version() -> str:
    try:
        return version("smartune")
    except PackageNotFoundError:
        return "0"


SPEC_VALIDATIONS = 2  # job specs validated at once (CPU work in threads: more would only queue on the GIL)


def key_file(settings: Settings) -> Path:
    return settings.bootstrap_key_file or settings.data_dir / "admin-key"


def _write_secret(path: Path, secret: str) -> None:
    """Create `path` with mode 0600 and write `secret`; fails if it exists (O_EXCL: written once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), 0o600)  # whatever the umask
        out.write(secret + "\n")


def bootstrap(db: Database, settings: Settings) -> Path | None:
    """Migrate the schema (unless a prestart step does: `migrate_on_start`); on a store without an admin key, mint one and write it to the key file (mode
    0600); return the file's path (to say where it is), or None when no key was minted.

    A key is minted once: never while the key file exists, even if that admin key has since been revoked
    (a lost admin key is replaced with `smartune admin create-key --admin`, on the store directly)."""
    if settings.migrate_on_start:
        migrate(db)
    path = key_file(settings)
    if not settings.bootstrap_admin or path.exists():
        return None
    with db.write_sessions() as session:
        if crud.count_admin_keys(session=session):
            return None
        _row, key = crud.create_api_key(session=session, team=None, is_admin=True, name="bootstrap admin")
        _write_secret(path, key)  # first: a key that exists only in the store would be known to nobody
        try:
            session.commit()
        except BaseException:
            path.unlink(missing_ok=True)
            raise
    return path


def create_app(
    settings: Settings | None = None,
    *,
    ray: RayJobs | None = None,
    tracker: Tracker | None = None,
    access: TeamAccess | None = None,
    run_engine: bool = True,
) -> FastAPI:
    """Build the app; `ray`, `tracker` and `access` replace the real Ray and MLflow adapters (tests)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        db = connect(settings.sqlalchemy_url, timeout_s=settings.db_timeout_s)
        written = bootstrap(db, settings)
        if written:
            print(f"smartune: bootstrap admin key written to {written} (mode 0600)", flush=True)  # noqa: T201
        app.state.settings, app.state.db = settings, db
        app.state.key_cache = KeyCache(settings.key_cache_ttl_s)
        app.state.writer = Writer(size=1 if db.is_sqlite else settings.write_concurrency)
        app.state.spec_limiter = anyio.CapacityLimiter(SPEC_VALIDATIONS)
        app.state.ray = ray or JobSubmissionAdapter(
            settings.ray_address or f"http://127.0.0.1:{settings.ray_dashboard_port}",
            token=settings.ray_auth_token,
            timeout_s=settings.ray_timeout_s,
            empty_ok=bool(settings.autoscaled_node_types),  # live nodes offering nothing: a pool of zero
        )
        app.state.tracker = tracker or MlflowTracker(
            settings.tracking_uri, settings.mlflow_experiment, settings.artifact_root
        )
        app.state.engine = Engine(db=db, ray=app.state.ray, tracker=app.state.tracker, settings=settings,
                                  access=access or team_access(settings))  # fmt: skip
        if run_engine:
            app.state.engine.start()
        gc.freeze()  # the start-up heap (FastAPI, pydantic, SQLAlchemy) leaves the GC's scans: shorter pauses
        try:
            yield
        finally:
            app.state.engine.stop()
            db.dispose()

    app = FastAPI(
        title="smartune",
        version=_version(),
        summary="Robust fine-tuning sweeps (SMART) on a team-shared GPU pool: jobs, queue, quotas.",
        openapi_tags=TAGS,
        lifespan=lifespan,
        docs_url=None,  # served below, each page with its own Content-Security-Policy
        redoc_url=None,
    )
    errors.install(app)
    app.state.rate_limiter = RateLimiter(settings.rate_limit_per_s, settings.rate_limit_burst)
    # Middleware added last runs first: the headers wrap everything (413s and CORS answers included), the
    # HTTP metrics count every answer, and the request id (service.http.logs) is set before anything logs.
    uploads = frozenset({f"{API_PREFIX}/datasets"})  # limited by the route: SMARTUNE_DATASET_MAX_BYTES
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes, own_limit=uploads)
    if settings.cors_allow_origins:
        app.add_middleware(CORSMiddleware, **cors_options(settings.cors_allow_origins))  # type: ignore[arg-type]
    app.add_middleware(SecurityHeadersMiddleware)
    http_metrics.install(app, timeout_s=settings.db_timeout_s)
    app.add_middleware(RequestIdMiddleware)
    # Routes with a `{job_id}` log with it (bind_job_id: a no-op elsewhere).
    app.include_router(api_router, prefix=API_PREFIX, dependencies=[Depends(bind_job_id)])
    app.include_router(health.router)
    app.include_router(metrics.router)
    _add_pages(app)
    dashboard.install(app, settings)  # after errors.install: its error pages wrap the JSON handler
    openapi.install(app, [JobSpec])
    return app


def _html(html: str, policy: str | None = None) -> HTMLResponse:
    return HTMLResponse(html, headers={"Content-Security-Policy": policy} if policy else None)


def _add_pages(app: FastAPI) -> None:
    """The home page (a redirect to the dashboard) and the two documentation pages."""
    swagger = bytes(
        get_swagger_ui_html(openapi_url="/openapi.json", title="smartune - Swagger UI").body
    ).decode()
    redoc = bytes(get_redoc_html(openapi_url="/openapi.json", title="smartune - ReDoc").body).decode()

    @app.get("/", include_in_schema=False)
    async def read_home() -> RedirectResponse:
        """The home page is the dashboard (the API's documentation is at /docs)."""
        return RedirectResponse(DASHBOARD_HOME, status_code=307)

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    async def read_docs() -> HTMLResponse:
        return _html(swagger, docs_policy(swagger))

    @app.get("/redoc", response_class=HTMLResponse, include_in_schema=False)
    async def read_redoc() -> HTMLResponse:
        return _html(redoc, docs_policy(redoc))
