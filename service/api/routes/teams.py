"""Teams (admin only): create, list, read, and set quota, weight and default priority; issue keys.

Plain `def` routes: FastAPI runs them, and their queries, in its thread pool."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.api.bodies import ApiKeyCreate, TeamCreate, TeamUpdate
from service.api.deps import AdminKey, EngineDep, KeyCacheDep, SessionDep, SettingsDep, WriteSessionDep
from service.api.responses import KEYED, errors
from service.api.views import key_public
from service.config import Settings
from service.errors import ApiError, not_found
from service.schemas import ApiKeyCreated, ApiKeysPublic, TeamPublic, TeamsPublic
from service.storage import usage
from service.store import crud
from service.store.models import Team

router = APIRouter(prefix="/teams", tags=["teams"])
_NOTES = {403: "not an admin key", 404: "no such team"}
_READ = errors(*KEYED, 403, notes=_NOTES)
_READ_ONE = errors(*KEYED, 403, 404, notes=_NOTES)
_WRITE_ONE = errors(400, *KEYED, 403, 404, 413, 422, notes=_NOTES)


def _public(session: Session, settings: Settings, teams: list[Team]) -> list[TeamPublic]:
    """The teams as shown, each with its disk use against its storage quota (service.storage)."""
    used = usage.usages(session, settings, teams)
    return [TeamPublic.model_validate(t).model_copy(update={"storage": used[t.id].public()}) for t in teams]


def _team(session: SessionDep, name: str) -> Team:
    team = crud.get_team(session=session, name=name)
    if team is None:
        raise not_found("team", name)
    return team


@router.post(
    "",
    status_code=201,
    response_model=TeamPublic,
    responses=errors(400, *KEYED, 403, 409, 413, 422, notes={**_NOTES, 409: "the team exists already"}),
)
def create_team(
    team_in: TeamCreate, session: WriteSessionDep, _admin: AdminKey, settings: SettingsDep, engine: EngineDep
) -> TeamPublic:
    """Create a team with its quotas (GPUs, CPUs, concurrent jobs, storage), fair-share weight and default
    priority. Where MLflow has users per team, the engine's next round creates the team's
    (`smartune admin mlflow-login TEAM` prints its login)."""
    try:
        team = crud.create_team(session=session, team_in=team_in)
        session.commit()
    except IntegrityError as err:
        raise ApiError(409, f"team {team_in.name!r} exists already", field="name") from err
    engine.wake()  # its MLflow user (service.engine.mlflow_teams) at the next round
    return _public(session, settings, [team])[0]


@router.get("", response_model=TeamsPublic, responses=_READ)
def read_teams(session: SessionDep, _admin: AdminKey, settings: SettingsDep) -> TeamsPublic:
    """List the teams, each with its disk use (`storage`: used and quota bytes, by kind)."""
    teams = list(crud.list_teams(session=session))
    return TeamsPublic(data=_public(session, settings, teams), count=len(teams))


@router.get("/{name}", response_model=TeamPublic, responses=_READ_ONE)
def read_team(name: str, session: SessionDep, _admin: AdminKey, settings: SettingsDep) -> TeamPublic:
    """Read a team, with its disk use."""
    return _public(session, settings, [_team(session, name)])[0]


@router.patch("/{name}", response_model=TeamPublic, responses=_WRITE_ONE)
def update_team(
    name: str,
    team_in: TeamUpdate,
    session: WriteSessionDep,
    _admin: AdminKey,
    cache: KeyCacheDep,
    engine: EngineDep,
    settings: SettingsDep,
) -> TeamPublic:
    """Change a team's quotas (GPUs, CPUs, jobs, storage), weight, priorities, budgets or checkpoint
    retention (the scheduler's at its next round; the storage quota at the next upload or submission)."""
    team = crud.update_team(session=session, team=_team(session, name), team_in=team_in)
    session.commit()
    cache.clear()
    engine.wake()
    return _public(session, settings, [team])[0]


@router.post("/{name}/keys", status_code=201, response_model=ApiKeyCreated, responses=_WRITE_ONE)
def create_team_key(
    name: str, key_in: ApiKeyCreate, session: WriteSessionDep, _admin: AdminKey
) -> ApiKeyCreated:
    """Issue an API key for the team; the key is in this answer only (only its digest is stored)."""
    row, key = crud.create_api_key(
        session=session, team=_team(session, name), is_admin=key_in.is_admin, name=key_in.name
    )
    session.commit()
    return ApiKeyCreated(**key_public(row).model_dump(), key=key)


@router.get("/{name}/keys", response_model=ApiKeysPublic, responses=_READ_ONE)
def read_team_keys(name: str, session: SessionDep, _admin: AdminKey) -> ApiKeysPublic:
    """List a team's keys (ids and dates; never the keys)."""
    keys = crud.list_api_keys(session=session, team=_team(session, name))
    return ApiKeysPublic(data=[key_public(k) for k in keys], count=len(keys))
