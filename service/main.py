"""The FastAPI application: `create_app()` builds it; its lifespan opens the job store, runs the migrations,
bootstraps an admin key on first start, and runs the engine (scheduler, dispatcher, reconciler) thread.

Serve it with `smartune serve`, or `uvicorn --factory service.main:create_app`. Importing this module
changes nothing: no database, no Ray, no migrations.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from service import crud, errors
from service.api.deps import KeyCache, Writer
from service.api.main import api_router
from service.api.routes import health
from service.config import Settings, get_settings
from service.db import Database, connect, migrate
from service.engine import Engine
from service.limits import BodyLimitMiddleware
from service.ray_jobs import JobSubmissionAdapter, RayJobs
from service.tracking import MlflowTracker, Tracker

logger = logging.getLogger(__name__)

API_PREFIX = "/api/v1"
TAGS = [
    {"name": "jobs", "description": "Submit sweeps, follow them, cancel them, read their logs and results."},
    {
        "name": "pool",
        "description": "The shared GPU pool: capacity, usage by team, the queue and its reasons.",
    },
    {"name": "teams", "description": "Teams, quotas and keys (admin keys only)."},
    {"name": "keys", "description": "API keys."},
    {"name": "health", "description": "Liveness and readiness."},
]

_HOME = """<!doctype html>
<html><head><meta charset="utf-8"><title>smartune</title></head>
<body style="font-family: sans-serif; max-width: 40em; margin: 3em auto">
<h1>smartune</h1>
<p>The control plane of robust fine-tuning sweeps (SMART) on a shared GPU pool.
The sweep dashboard is not built yet; the REST API is.</p>
<ul>
<li><a href="/docs">API documentation (Swagger UI)</a> &middot; <a href="/redoc">ReDoc</a>
 &middot; <a href="/openapi.json">OpenAPI document</a></li>
<li>API root: <code>/api/v1</code>; every endpoint but <code>/healthz</code> wants
<code>Authorization: Bearer &lt;key&gt;</code></li>
<li><a href="/healthz">/healthz</a></li>
</ul>
</body></html>
"""


def _version() -> str:
    try:
        return version("smartune")
    except PackageNotFoundError:
        return "0"


def bootstrap(db: Database, settings: Settings) -> str | None:
    """Migrate the schema; on a store without an admin key, create one and return it (to show once)."""
    migrate(db)
    if not settings.bootstrap_admin:
        return None
    with db.write_sessions() as session:
        if crud.count_admin_keys(session=session):
            return None
        _row, key = crud.create_api_key(session=session, team=None, is_admin=True, name="bootstrap admin")
        session.commit()
    return key


def create_app(
    settings: Settings | None = None,
    *,
    ray: RayJobs | None = None,
    tracker: Tracker | None = None,
    run_engine: bool = True,
) -> FastAPI:
    """Build the app; `ray` and `tracker` replace the real Ray and MLflow adapters (tests)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        db = connect(settings.sqlalchemy_url)
        admin_key = bootstrap(db, settings)
        if admin_key:
            print(f"smartune: bootstrap admin key (shown once, keep it): {admin_key}", flush=True)  # noqa: T201
        app.state.settings, app.state.db = settings, db
        app.state.key_cache = KeyCache(settings.key_cache_ttl_s)
        app.state.writer = Writer(inline=db.is_sqlite, size=settings.write_concurrency)
        app.state.ray = ray or JobSubmissionAdapter(
            settings.ray_address or f"http://127.0.0.1:{settings.ray_dashboard_port}",
            token=settings.ray_auth_token,
        )
        app.state.tracker = tracker or MlflowTracker(
            settings.tracking_uri, settings.mlflow_experiment, settings.artifact_root
        )
        app.state.engine = Engine(db=db, ray=app.state.ray, tracker=app.state.tracker, settings=settings)
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
    )
    errors.install(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.include_router(api_router, prefix=API_PREFIX)
    app.include_router(health.router)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def read_home() -> str:
        """A placeholder page until the dashboard exists: where the API documentation is."""
        return _HOME

    return app
