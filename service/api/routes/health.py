"""Liveness (`/healthz`) and readiness (`/readyz`: the database and Ray answer), both without a key.

Probes carry no key (a Kubernetes kubelet, a compose healthcheck), so neither asks for one and neither
says more than "ok" or "unreachable" per dependency: the cause (an address, a driver message) goes to the
log only. `/healthz` is `async def` and touches nothing, so it answers while the database or the thread
pool is stuck (that is what liveness means). `/readyz` asks the database and Ray from the thread pool;
its answer is kept for the setting `ready_ttl_s` (1 s), so callers without a key cannot turn it into load on either.
"""

from __future__ import annotations

import logging
import threading
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from service.api.deps import RayJobsDep
from service.api.responses import RETRY_AFTER
from service.engine.ray_jobs import RayJobs, RayUnavailable
from service.errors import DB_RETRY_AFTER_S
from service.schemas import HealthPublic, ReadyPublic
from service.store.db import Database

logger = logging.getLogger(__name__)
router = APIRouter(tags=["health"])
_ready_lock = threading.Lock()


@router.get("/healthz", response_model=HealthPublic)
async def read_health() -> HealthPublic:
    """The process is up (no key, no database)."""
    return HealthPublic(status="ok")


@router.get(
    "/readyz",
    response_model=ReadyPublic,
    responses={
        503: {
            "description": "the database or Ray does not answer: the report says which",
            "model": ReadyPublic,
            "headers": RETRY_AFTER,
        },
    },
)
def read_ready(request: Request, ray: RayJobsDep) -> ReadyPublic | JSONResponse:
    """The database and the Ray cluster both answer (503 otherwise, saying which does not)."""
    state = request.app.state
    with _ready_lock:  # concurrent probes share one check
        cached: tuple[float, ReadyPublic] | None = getattr(state, "ready_cache", None)
        if cached is None or time.monotonic() - cached[0] >= state.settings.ready_ttl_s:
            cached = (time.monotonic(), _check(state.db, ray))
            state.ready_cache = cached
    ready = cached[1]
    if ready.status == "ok":
        return ready
    return JSONResponse(ready.model_dump(), status_code=503, headers={"Retry-After": str(DB_RETRY_AFTER_S)})


def _check(db: Database, ray: RayJobs) -> ReadyPublic:
    database = ray_state = "ok"
    try:
        with db.sessions() as session:
            session.execute(text("SELECT 1"))
    except Exception as err:  # any driver error means not ready; the cause goes to the log only
        logger.warning("readiness: the database does not answer: %s", err)
        database = "unreachable"
    try:
        ray.ping()
    except RayUnavailable as err:
        logger.warning("readiness: Ray does not answer: %s", err)
        ray_state = "unreachable"
    status = "ok" if database == ray_state == "ok" else "unavailable"
    return ReadyPublic(status=status, database=database, ray=ray_state)
