"""Liveness (`/healthz`, no auth) and readiness (`/readyz`: the database and Ray answer).

Neither is rate limited: probes come often, from the orchestrator. `/healthz` is `async def` and touches
nothing, so it answers while the database or the thread pool is stuck (that is what liveness means);
`/readyz` asks the database and Ray from the thread pool. While the database is down, a key that must be
looked up cannot be checked: that probe gets the usual 503 error body (`ErrorBody`) instead of the report.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from service.api.deps import ProbeKey, RayJobsDep, SessionDep
from service.api.responses import RETRY_AFTER, errors, one_of
from service.errors import DB_RETRY_AFTER_S, ErrorBody
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
        503: {
            "description": "the database or Ray does not answer: the report says which (or, when the key "
            "cannot be checked because the database is down, the error body)",
            "content": one_of(ReadyPublic, ErrorBody),
            "headers": RETRY_AFTER,
        },
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
    if ready.status == "ok":
        return ready
    return JSONResponse(ready.model_dump(), status_code=503, headers={"Retry-After": str(DB_RETRY_AFTER_S)})
