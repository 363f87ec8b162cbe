"""Dashboard sessions in the job store: keyword-only functions on a session, no FastAPI. Callers commit.

A session is a row keyed by the SHA-256 of the random token its cookie carries (service.dashboard.auth), so
the store never holds a usable cookie. It lives until its expiry, its logout (`end_session`) or its key's
revocation (`end_key_sessions`); expired rows are purged at each login (`purge_expired`, one indexed delete).
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from service.store.db import utcnow
from service.store.models import ApiKey, DashboardSession


def session_id_of(token: str) -> str:
    """The row id of a cookie's token: its SHA-256, hex (64 characters)."""
    return hashlib.sha256(token.encode()).hexdigest()


def open_session(*, session: Session, key: ApiKey, token: str, ttl_s: float) -> DashboardSession:
    """Record a new session of `key` for `token`, ending `ttl_s` seconds from now."""
    now = utcnow()
    row = DashboardSession(
        id=session_id_of(token), api_key_id=key.id, created_at=now, expires_at=now + timedelta(seconds=ttl_s)
    )
    session.add(row)
    session.flush()
    return row


def live_session(*, session: Session, token: str) -> DashboardSession | None:
    """The unexpired session of `token` whose key is not revoked, with its key and team (one query)."""
    row = session.scalar(select(DashboardSession).where(DashboardSession.id == session_id_of(token)))
    if row is None or row.expires_at <= utcnow() or row.api_key.revoked_at is not None:
        return None
    return row


def end_session(*, session: Session, session_id: str) -> None:
    """Delete one session (logout); a session already gone is no error."""
    session.execute(delete(DashboardSession).where(DashboardSession.id == session_id))


def end_key_sessions(*, session: Session, key: ApiKey) -> None:
    """Delete every session of `key` (its revocation)."""
    session.execute(delete(DashboardSession).where(DashboardSession.api_key_id == key.id))


def purge_expired(*, session: Session, now: datetime | None = None) -> int:
    """Delete the sessions that expired before `now`; return how many."""
    result = session.execute(delete(DashboardSession).where(DashboardSession.expires_at <= (now or utcnow())))
    return int(getattr(result, "rowcount", 0) or 0)
