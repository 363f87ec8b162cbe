"""Dashboard sessions live in the job store: a saved cookie opens nothing after its logout, its key's
revocation or its expiry; the store keeps only the token's digest; expired rows are purged at login."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from service.store import crud, dashboard_sessions
from service.store.db import Database, utcnow
from service.store.models import DashboardSession
from tests.service.dashboard_utils import csrf_of, logged_in


def _rows(db: Database) -> list[DashboardSession]:
    with db.sessions() as session:
        return list(session.scalars(select(DashboardSession)))


def _replay(client: TestClient, cookie: str) -> int:
    """The status of /ui/jobs for a browser that kept a copy of `cookie`."""
    client.cookies.clear()
    client.cookies.set("smartune_session", cookie, path="/ui")
    return client.get("/ui/jobs", follow_redirects=False).status_code


def test_a_saved_cookie_opens_nothing_after_logout(client: TestClient, db: Database, team_key: str) -> None:
    logged_in(client, team_key)
    saved = client.cookies.get("smartune_session") or ""
    assert _replay(client, saved) == 200 and len(_rows(db)) == 1
    token = csrf_of(client.get("/ui/jobs").text)
    assert client.post("/ui/logout", data={"csrf": token}, follow_redirects=False).status_code == 303
    assert _rows(db) == []
    assert _replay(client, saved) == 303
    assert client.get("/ui/data/jobs").status_code == 401  # the charts' JSON likewise


def test_logout_ends_only_its_own_session(client: TestClient, team_key: str) -> None:
    other = TestClient(client.app)
    logged_in(other, team_key)
    logged_in(client, team_key)
    client.post("/ui/logout", data={"csrf": csrf_of(client.get("/ui/jobs").text)})
    assert other.get("/ui/jobs", follow_redirects=False).status_code == 200


def test_revoking_the_key_deletes_its_sessions(
    client: TestClient, db: Database, team_key: str, admin_key: str
) -> None:
    logged_in(client, team_key)
    saved = client.cookies.get("smartune_session") or ""
    admin = TestClient(client.app)
    logged_in(admin, admin_key)
    key_id = team_key.split("_")[1]
    revoked = client.delete(f"/api/v1/keys/{key_id}", headers={"Authorization": f"Bearer {admin_key}"})
    assert revoked.status_code == 200, revoked.text
    assert [row.api_key.key_id for row in _rows(db)] == [admin_key.split("_")[1]]
    assert _replay(client, saved) == 303
    assert admin.get("/ui/jobs", follow_redirects=False).status_code == 200


def test_the_store_keeps_only_the_tokens_digest(client: TestClient, db: Database, team_key: str) -> None:
    logged_in(client, team_key)
    cookie = client.cookies.get("smartune_session") or ""
    token, _, _mac = cookie.partition(".")
    (row,) = _rows(db)
    assert row.id == dashboard_sessions.session_id_of(token) and token not in row.id
    assert team_key.split("_")[1] not in cookie  # the cookie names no key either


def test_an_expired_session_is_refused_and_purged_at_the_next_login(
    client: TestClient, db: Database, team_key: str
) -> None:
    logged_in(client, team_key)
    saved = client.cookies.get("smartune_session") or ""
    with db.write_sessions() as session:
        (row,) = session.scalars(select(DashboardSession))
        row.expires_at = utcnow() - timedelta(seconds=1)
        session.commit()
    assert _replay(client, saved) == 303
    logged_in(client, team_key)  # a new login purges the expired row
    (fresh,) = _rows(db)
    assert fresh.expires_at > utcnow() + timedelta(hours=7)  # the 8 h default
    assert _replay(client, client.cookies.get("smartune_session") or "") == 200


def test_purge_expired_deletes_only_expired_rows(db: Database, team_key: str) -> None:
    with db.write_sessions() as session:
        key = crud.get_api_key(session=session, key_id=team_key.split("_")[1])
        assert key is not None
        dashboard_sessions.open_session(session=session, key=key, token="old", ttl_s=1)
        dashboard_sessions.open_session(session=session, key=key, token="new", ttl_s=3600)
        assert dashboard_sessions.purge_expired(session=session, now=utcnow() + timedelta(seconds=2)) == 1
        count = session.scalar(select(func.count()).select_from(DashboardSession))
        assert count == 1
        assert dashboard_sessions.live_session(session=session, token="new") is not None
        assert dashboard_sessions.live_session(session=session, token="old") is None
