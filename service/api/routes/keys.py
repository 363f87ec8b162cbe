"""API keys: who am I, and (admin only) revoking a key by its public id.

A key id is 12 hex characters (service.security); the route matches only those, so `/keys/me` is one
resource (GET) and a DELETE of it is a 405, not a revocation of a key named "me"."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from starlette.convertors import Convertor, register_url_convertor

from service.api.deps import AdminKey, CurrentKey, KeyCacheDep, WriteSessionDep
from service.api.responses import KEYED, errors
from service.api.views import key_public
from service.errors import ApiError, not_found
from service.schemas import ApiKeyPublic, WhoAmI
from service.store import crud

router = APIRouter(prefix="/keys", tags=["keys"])
KEY_ID = "[0-9a-f]{12}"


class KeyIdConvertor(Convertor[str]):
    regex = KEY_ID

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("key_id", KeyIdConvertor())
KeyId = Annotated[str, Path(pattern=f"^{KEY_ID}$", description="a key's public id (12 hex characters)")]


@router.get("/me", response_model=WhoAmI, responses=errors(*KEYED))
async def read_own_key(key: CurrentKey) -> WhoAmI:
    """The calling key's id, team and role."""
    return WhoAmI(key_id=key.key_id, team=key.team_name, is_admin=key.is_admin)


@router.delete(
    "/{key_id:key_id}",
    response_model=ApiKeyPublic,
    responses=errors(
        *KEYED, 403, 404, 409, notes={409: "a key cannot revoke itself (use another admin key)"}
    ),
)
def delete_key(key_id: KeyId, session: WriteSessionDep, admin: AdminKey, cache: KeyCacheDep) -> ApiKeyPublic:
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
