"""Teams (admin only): create, list, read, and set quota, weight and default priority; issue keys.

Plain `def` routes: FastAPI runs them, and their queries, in its thread pool."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy.exc import IntegrityError

from service.api.bodies import ApiKeyCreate, TeamCreate, TeamUpdate
from service.api.deps import AdminKey, EngineDep, KeyCacheDep, SessionDep, WriteSessionDep
from service.api.responses import KEYED, errors
from service.api.views import key_public
from service.errors import ApiError, not_found
from service.schemas import ApiKeyCreated, ApiKeysPublic, TeamPublic, TeamsPublic
from service.store import crud
from service.store.models import Team

router = APIRouter(prefix="/teams", tags=["teams"])
_NOTES = {403: "not an admin key", 404: "no such team"}
_READ = errors(*KEYED, 403, notes=_NOTES)
_READ_ONE = errors(*KEYED, 403, 404, notes=_NOTES)
_WRITE_ONE = errors(400, *KEYED, 403, 404, 413, 422, notes=_NOTES)


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
def create_team(team_in: TeamCreate, session: WriteSessionDep, _admin: AdminKey) -> Team:
    """Create a team with its quota (GPUs, concurrent jobs), fair-share weight and default priority."""
    try:
        team = crud.create_team(session=session, team_in=team_in)
        session.commit()
    except IntegrityError as err:
        raise ApiError(409, f"team {team_in.name!r} exists already", field="name") from err
    return team


@router.get("", response_model=TeamsPublic, responses=_READ)
def read_teams(session: SessionDep, _admin: AdminKey) -> TeamsPublic:
    """List the teams."""
    teams = crud.list_teams(session=session)
    return TeamsPublic(data=[TeamPublic.model_validate(t) for t in teams], count=len(teams))


@router.get("/{name}", response_model=TeamPublic, responses=_READ_ONE)
def read_team(name: str, session: SessionDep, _admin: AdminKey) -> Team:
    """Read a team."""
    return _team(session, name)


@router.patch("/{name}", response_model=TeamPublic, responses=_WRITE_ONE)
def update_team(
    name: str,
    team_in: TeamUpdate,
    session: WriteSessionDep,
    _admin: AdminKey,
    cache: KeyCacheDep,
    engine: EngineDep,
) -> Team:
    """Change a team's quota, weight or default priority (takes effect at the next scheduler round)."""
    team = crud.update_team(session=session, team=_team(session, name), team_in=team_in)
    session.commit()
    cache.clear()
    engine.wake()
    return team


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
