"""Liveness (`/healthz`, no auth) and readiness (`/readyz`: the database and Ray answer).

Neither is rate limited: probes come often, from the orchestrator. `/healthz` is `async def` and touches
nothing, so it answers while the database or the thread pool is stuck (that is what liveness means);
`/readyz` asks the database and Ray from the thread pool.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from service.api.deps import ProbeKey, RayJobsDep, SessionDep
from service.api.responses import errors
from service.ray_jobs import RayUnavailable
from service.schemas import HealthPublic, ReadyPublic

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthPublic)
async def read_health() -> HealthPublic:
    """The process is up (no key, no database)."""
    return HealthPublic(status="ok")


@router.get(
    "/readyz",
    response_model=ReadyPublic,
    responses={
        **errors(401),
        503: {"model": ReadyPublic, "description": "the database or Ray does not answer (says which)"},
    },
)
def read_ready(session: SessionDep, ray: RayJobsDep, _key: ProbeKey) -> ReadyPublic | JSONResponse:
    """The database and the Ray cluster both answer (503 otherwise, saying which does not)."""
    try:
        session.execute(text("SELECT 1"))
        database = "ok"
    except Exception as err:  # any driver error means not ready
        database = f"unreachable: {type(err).__name__}"
    try:
        ray.ping()
        ray_state = "ok"
    except RayUnavailable as err:
        ray_state = f"unreachable: {err}"[:300]
    ready = ReadyPublic(
        status="ok" if database == ray_state == "ok" else "unavailable", database=database, ray=ray_state
    )
    return ready if ready.status == "ok" else JSONResponse(ready.model_dump(), status_code=503)
