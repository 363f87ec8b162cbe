"""Registered models: a team's, one per task (`smartune-<team>-<task>`), each with its latest version and the
version its alias `best` names, that version's dev score and job (service.engine.registered_models).

A team's key lists its own team's; an admin key names a team (`?team=`) or lists every team's. MLflow is
read off the event loop, within `SMARTUNE_MLFLOW_TIMEOUT_S`: an MLflow that does not answer is a 503.
"""

from __future__ import annotations

from typing import Annotated

import anyio
import anyio.to_thread
from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from service.api.deps import CurrentKey, Principal, SessionDep, SettingsDep
from service.api.responses import KEYED, errors
from service.api.views import model_public
from service.engine.registered_models import TeamModel
from service.engine.tracking import Tracker
from service.errors import ApiError, not_found
from service.schemas import RegisteredModelsPublic
from service.store import crud

router = APIRouter(prefix="/models", tags=["models"])

TeamQuery = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=64,
        pattern=r"^[a-z0-9][a-z0-9_.-]*$",
        description="whose models (admin keys; a team's key may name only its own team); unset = the key's "
        "team, or every team's for a team-less admin key",
    ),
]
NOTES = {
    404: "no such team among those the caller may read",
    503: "the database or MLflow is unreachable (or does not answer in time); wait `Retry-After` seconds",
}


def _teams(session: Session, key: Principal, team: str | None) -> list[str]:
    """The teams whose models the caller asked for and may read."""
    if not key.is_admin or (team is None and key.team_name is not None):
        if team is not None and team != key.team_name:
            raise not_found("team", team)  # another team's: as if it did not exist
        return [key.team_name] if key.team_name else []
    if team is not None:
        if crud.get_team(session=session, name=team) is None:
            raise not_found("team", team)
        return [team]
    return [t.name for t in crud.list_teams(session=session)]


@router.get("", response_model=RegisteredModelsPublic, responses=errors(*KEYED, 404, 422, notes=NOTES))
async def read_models(
    request: Request, session: SessionDep, key: CurrentKey, settings: SettingsDep, team: TeamQuery = None
) -> RegisteredModelsPublic:
    """The team's registered models by name: each task's `smartune-<team>-<task>` with its latest version,
    the version `best` names, that version's dev score and metric, and its job."""
    teams = await run_in_threadpool(_teams, session, key, team)
    tracker: Tracker = request.app.state.tracker

    def read() -> list[TeamModel]:
        return [model for name in teams for model in tracker.models(name)]

    try:
        with anyio.fail_after(settings.mlflow_timeout_s):
            found = await anyio.to_thread.run_sync(read, abandon_on_cancel=True)
    except Exception as err:  # unreachable, refusing, or too slow: not the caller's fault
        raise ApiError(503, "MLflow could not list the registered models now; try again later") from err
    data = [model_public(model, settings) for model in found]
    return RegisteredModelsPublic(data=data, count=len(data))
