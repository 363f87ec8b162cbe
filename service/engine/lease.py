"""A lease in the job store, so that among several control-plane replicas only one engine schedules.

Two engines would each read the same free pool and admit jobs into it twice. The holder of the `engine`
lease renews it every round; a replica that crashes loses it after `ttl_s`, and another takes over. The
claim is one conditional UPDATE (or the first INSERT), atomic on SQLite (writes are serialised) and on
PostgreSQL (row locks): at most one holder at a time.
"""

from __future__ import annotations

import os
import socket
import uuid
from datetime import timedelta

from sqlalchemy import or_, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from service.store.db import utcnow
from service.store.models import Lease

ENGINE_LEASE = "engine"


def holder_id() -> str:
    """This process, recognisably: host, pid and a random part (pids repeat across hosts and restarts)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def acquire(sessions: sessionmaker[Session], name: str, holder: str, ttl_s: float) -> bool:
    """Take or renew the lease for `ttl_s` seconds; False when another holder's lease is still valid."""
    now = utcnow()
    until = now + timedelta(seconds=ttl_s)
    with sessions() as session, session.begin():
        claim = (
            update(Lease)
            .where(Lease.name == name, or_(Lease.holder == holder, Lease.expires_at < now))
            .values(holder=holder, expires_at=until)
        )
        if session.execute(claim).rowcount:  # type: ignore[attr-defined]  # a CursorResult for an UPDATE
            return True
        if session.get(Lease, name) is not None:
            return False
    try:  # nobody ever held it: the first INSERT wins, a concurrent one fails on the primary key
        with sessions() as session, session.begin():
            session.add(Lease(name=name, holder=holder, expires_at=until))
        return True
    except IntegrityError:
        return False


def release(sessions: sessionmaker[Session], name: str, holder: str) -> None:
    """Give the lease up at once (a clean shutdown), so a standby replica need not wait for it to lapse."""
    with sessions() as session, session.begin():
        session.execute(
            update(Lease).where(Lease.name == name, Lease.holder == holder).values(expires_at=utcnow())
        )
