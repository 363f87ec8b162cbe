"""The wiring: sessions, settings, the Ray adapter, the engine and the caller's key, as `Annotated` deps.

Everything lives on `app.state` (set up by the lifespan in service.main); tests swap any of it with
`app.dependency_overrides`. Keys arrive as `Authorization: Bearer <key>`. The dependencies that do no I/O
are `async def`, so FastAPI does not hop to its thread pool for each of them (opening a session does no I/O
either). Reading the caller's key is one indexed query on the event loop, then cached for a few seconds.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Annotated, TypeVar

import anyio
import anyio.to_thread
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from service import crud, security
from service.config import Settings
from service.db import Database
from service.engine import Engine
from service.errors import ApiError
from service.ray_jobs import RayJobs

T = TypeVar("T")

bearer = HTTPBearer(auto_error=False, description="an API key: `smt_<key id>_<secret>`")


async def get_db(request: Request) -> Database:
    return request.app.state.db  # type: ignore[no-any-return]


async def get_session(db: Annotated[Database, Depends(get_db)]) -> AsyncIterator[Session]:
    with db.sessions() as session:
        yield session


async def get_write_session(db: Annotated[Database, Depends(get_db)]) -> AsyncIterator[Session]:
    with db.write_sessions() as session:
        yield session


async def get_app_settings(request: Request) -> Settings:
    return request.app.state.settings  # type: ignore[no-any-return]


async def get_ray(request: Request) -> RayJobs:
    return request.app.state.ray  # type: ignore[no-any-return]


async def get_engine(request: Request) -> Engine:
    return request.app.state.engine  # type: ignore[no-any-return]


class Writer:
    """Runs a write handler's work: on the event loop for SQLite (one writer at a time, no thread hops, no
    waiting inside the database: its lock is taken and released within the call), else on a thread pool
    of its own, `size` at a time. The session is closed before the call returns, so no transaction (and
    no SQLite write lock) outlives it across an `await`."""

    def __init__(self, *, inline: bool, size: int = 1) -> None:
        self.inline = inline
        self.limiter = anyio.CapacityLimiter(size)

    async def run(self, session: Session, work: Callable[[], T]) -> T:
        def closing() -> T:
            try:
                return work()
            finally:
                session.close()

        if self.inline:
            return closing()
        return await anyio.to_thread.run_sync(closing, limiter=self.limiter)


async def get_writer(request: Request) -> Writer:
    return request.app.state.writer  # type: ignore[no-any-return]


# scope="function": the session closes when the handler returns, before the response is sent, so no
# connection waits on a slow client (nor holds a WAL snapshot) while the event loop serves others.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
WriteSessionDep = Annotated[Session, Depends(get_write_session, scope="function")]
SettingsDep = Annotated[Settings, Depends(get_app_settings)]
RayJobsDep = Annotated[RayJobs, Depends(get_ray)]
EngineDep = Annotated[Engine, Depends(get_engine)]
WriterDep = Annotated[Writer, Depends(get_writer)]


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key's public id, its team (None for a team-less admin key), admin or not."""

    key_id: str
    team_id: int | None
    team_name: str | None
    is_admin: bool

    @property
    def scope(self) -> int | None:
        """The team whose jobs the caller sees; None = every team (admins)."""
        return None if self.is_admin or self.team_id is None else self.team_id


class KeyCache:
    """Recently verified keys (by digest) for `ttl_s` seconds, so a request costs no key lookup.

    Revoking a key or changing a team through the API clears it at once; a change made to the store
    behind this process's back (`smartune admin revoke-key`, another replica) is seen within `ttl_s`.
    """

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._entries: dict[str, tuple[float, Principal]] = {}

    def get(self, digest: str) -> Principal | None:
        entry = self._entries.get(digest)
        if entry is None or entry[0] < time.monotonic():
            return None
        return entry[1]

    def put(self, digest: str, principal: Principal) -> None:
        if self.ttl_s > 0:
            if len(self._entries) > 10_000:
                self._entries.clear()
            self._entries[digest] = (time.monotonic() + self.ttl_s, principal)

    def clear(self) -> None:
        self._entries.clear()


async def get_key_cache(request: Request) -> KeyCache:
    return request.app.state.key_cache  # type: ignore[no-any-return]


KeyCacheDep = Annotated[KeyCache, Depends(get_key_cache)]


def _unauthorized(detail: str) -> ApiError:
    return ApiError(401, detail, headers={"WWW-Authenticate": "Bearer"})


async def get_principal(
    session: SessionDep,
    cache: KeyCacheDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    """The caller's key, verified (runs on the event loop: one indexed lookup, then cached)."""
    if credentials is None:
        raise _unauthorized("missing API key: send 'Authorization: Bearer <key>'")
    digest = security.digest(credentials.credentials)
    if (found := cache.get(digest)) is not None:
        return found
    key = crud.authenticate(session=session, key=credentials.credentials)
    principal: Principal | None = None
    if key is not None:
        team = key.team
        principal = Principal(
            key.key_id, team.id if team else None, team.name if team else None, key.is_admin
        )
    session.rollback()  # ends the read: the connection goes back to the pool until the handler needs one
    if principal is None:
        raise _unauthorized("invalid or revoked API key")
    cache.put(digest, principal)
    return principal


CurrentKey = Annotated[Principal, Depends(get_principal)]


async def require_admin(principal: CurrentKey) -> Principal:
    if not principal.is_admin:
        raise ApiError(403, "this endpoint needs an admin key")
    return principal


async def require_team(principal: CurrentKey) -> Principal:
    if principal.team_id is None:
        raise ApiError(403, "this key belongs to no team; submit with a team's key")
    return principal


AdminKey = Annotated[Principal, Depends(require_admin)]
TeamKey = Annotated[Principal, Depends(require_team)]
