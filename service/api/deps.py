"""The wiring: sessions, settings, the Ray adapter, the engine and the caller's key, as `Annotated` deps.

Everything lives on `app.state` (set up by service.main); tests swap any of it with
`app.dependency_overrides`. Keys arrive as `Authorization: Bearer <key>`. The dependencies are `async def`
and do no I/O on the event loop: opening a session connects to nothing, and the one lookup a request may
need (an uncached key) runs in the thread pool, so a database that stalls (a held SQLite lock, a slow
PostgreSQL) stalls only the requests that wait for it, never the loop, /healthz or cached callers.
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

from service import security
from service.config import Settings
from service.engine.ray_jobs import RayJobs
from service.engine.rounds import Engine
from service.errors import ApiError
from service.http.ratelimit import RateLimiter, retry_after
from service.store import crud
from service.store.db import Database

T = TypeVar("T")

bearer = HTTPBearer(auto_error=False, description="an API key: `smt_<key id>_<secret>`")


async def get_db(request: Request) -> Database:
    return request.app.state.db  # type: ignore[no-any-return]


async def _closing(session: Session) -> AsyncIterator[Session]:
    try:
        yield session
    finally:
        # A session that began a transaction holds a connection: giving it back rolls back, which is I/O
        # (a round trip on PostgreSQL), so it happens in a thread. One that never connected closes here.
        if session.in_transaction():
            await anyio.to_thread.run_sync(session.close)
        else:
            session.close()


async def get_session(db: Annotated[Database, Depends(get_db)]) -> AsyncIterator[Session]:
    async for session in _closing(db.sessions()):
        yield session


async def get_write_session(db: Annotated[Database, Depends(get_db)]) -> AsyncIterator[Session]:
    async for session in _closing(db.write_sessions()):
        yield session


async def get_app_settings(request: Request) -> Settings:
    return request.app.state.settings  # type: ignore[no-any-return]


async def get_ray(request: Request) -> RayJobs:
    return request.app.state.ray  # type: ignore[no-any-return]


async def get_engine(request: Request) -> Engine:
    return request.app.state.engine  # type: ignore[no-any-return]


class Writer:
    """Runs a write handler's work in the thread pool, at most `size` at a time (1 for SQLite: one writer
    at a time, the others wait here, on the event loop, without holding a thread). The session is closed
    before the call returns, so no transaction (and no SQLite write lock) outlives it."""

    def __init__(self, *, size: int = 1) -> None:
        self.limiter = anyio.CapacityLimiter(size)

    async def run(self, session: Session, work: Callable[[], T]) -> T:
        def closing() -> T:
            try:
                return work()
            finally:
                session.close()

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


def _lookup(session: Session, key: str) -> Principal | None:
    """The live key's principal (in a worker thread: one indexed query), or None."""
    try:
        row = crud.authenticate(session=session, key=key)
        if row is None:
            return None
        team = row.team
        return Principal(row.key_id, team.id if team else None, team.name if team else None, row.is_admin)
    finally:
        session.rollback()  # ends the read: the connection goes back to the pool until the handler needs one


async def authenticate(
    session: Session, cache: KeyCache, credentials: HTTPAuthorizationCredentials | None
) -> Principal | None:
    """The verified caller, or None for a missing, malformed, unknown or revoked key."""
    if credentials is None:
        return None
    key = credentials.credentials
    digest = security.digest(key)
    if (found := cache.get(digest)) is not None:
        return found
    if security.parse_key_id(key) is None:  # malformed: no lookup needed to refuse it
        return None
    principal = await anyio.to_thread.run_sync(_lookup, session, key)
    if principal is not None:
        cache.put(digest, principal)
    return principal


async def get_rate_limiter(request: Request) -> RateLimiter:
    return request.app.state.rate_limiter  # type: ignore[no-any-return]


Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def _refuse(credentials: HTTPAuthorizationCredentials | None) -> ApiError:
    if credentials is None:
        return _unauthorized("missing API key: send 'Authorization: Bearer <key>'")
    return _unauthorized("invalid or revoked API key")


async def get_principal(
    request: Request,
    session: SessionDep,
    cache: KeyCacheDep,
    limiter: Annotated[RateLimiter, Depends(get_rate_limiter)],
    credentials: Credentials,
) -> Principal:
    """The caller's key, verified, within its rate limit (429 with Retry-After otherwise). A request
    without a valid key counts against its client address, so probing keys is limited too."""
    principal = await authenticate(session, cache, credentials)
    if principal is not None:
        identity = f"key:{principal.key_id}"
    else:
        identity = f"addr:{request.client.host if request.client else 'unknown'}"
    if (wait := limiter.acquire(identity)) > 0:
        limit = f"{limiter.rate:g} requests per second (bursts of {limiter.burst})"
        who = "per API key" if principal is not None else "per client address without a valid key"
        raise ApiError(
            429,
            f"rate limit exceeded: {limit} {who}; retry in {retry_after(wait)} s",
            headers={"Retry-After": retry_after(wait)},
        )
    if principal is None:
        raise _refuse(credentials)
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
