"""API keys: who am I, and (admin only) revoking a key by its public id."""

from __future__ import annotations

from fastapi import APIRouter

from service import crud
from service.api.deps import AdminKey, CurrentKey, KeyCacheDep, WriteSessionDep
from service.api.views import key_public
from service.errors import not_found
from service.schemas import ApiKeyPublic, ErrorBody, WhoAmI

router = APIRouter(prefix="/keys", tags=["keys"])


@router.get("/me", response_model=WhoAmI)
async def read_own_key(key: CurrentKey) -> WhoAmI:
    """The calling key's id, team and role."""
    return WhoAmI(key_id=key.key_id, team=key.team_name, is_admin=key.is_admin)


@router.delete("/{key_id}", response_model=ApiKeyPublic, responses={403: {"model": ErrorBody}})
def delete_key(key_id: str, session: WriteSessionDep, _admin: AdminKey, cache: KeyCacheDep) -> ApiKeyPublic:
    """Revoke a key: it stops working at once (the row stays, for the record)."""
    row = crud.get_api_key(session=session, key_id=key_id)
    if row is None:
        raise not_found("key", key_id)
    crud.revoke_api_key(session=session, key=row)
    session.commit()
    cache.clear()
    return key_public(row)
