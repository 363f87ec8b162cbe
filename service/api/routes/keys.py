"""API keys: who am I, and (admin only) revoking a key by its public id."""

from __future__ import annotations

from fastapi import APIRouter

from service import crud
from service.api.deps import AdminKey, CurrentKey, KeyCacheDep, WriteSessionDep
from service.api.responses import errors
from service.api.views import key_public
from service.errors import ApiError, not_found
from service.schemas import ApiKeyPublic, WhoAmI

router = APIRouter(prefix="/keys", tags=["keys"])


@router.get("/me", response_model=WhoAmI, responses=errors(401, 429))
async def read_own_key(key: CurrentKey) -> WhoAmI:
    """The calling key's id, team and role."""
    return WhoAmI(key_id=key.key_id, team=key.team_name, is_admin=key.is_admin)


@router.delete(
    "/{key_id}",
    response_model=ApiKeyPublic,
    responses=errors(
        401, 403, 404, 409, 429, notes={409: "a key cannot revoke itself (use another admin key)"}
    ),
)
def delete_key(key_id: str, session: WriteSessionDep, admin: AdminKey, cache: KeyCacheDep) -> ApiKeyPublic:
    """Revoke a key: it stops working at once (the row stays, for the record)."""
    if key_id == admin.key_id:  # an admin revoking the key it calls with would lock itself out
        raise ApiError(409, "a key cannot revoke itself; revoke it with another admin key", field="key_id")
    row = crud.get_api_key(session=session, key_id=key_id)
    if row is None:
        raise not_found("key", key_id)
    crud.revoke_api_key(session=session, key=row)
    session.commit()
    cache.clear()
    return key_public(row)
