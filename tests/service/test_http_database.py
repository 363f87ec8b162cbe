"""A database that cannot be reached is a 503 with `Retry-After` on every endpoint that needs it, in the
usual error body and never with a traceback; `/healthz` (no database) stays 200 and `/readyz` says the
database is down. The store is made unreachable for real: the app's database is swapped for one whose
SQLite file lies in a folder that has been removed."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy.exc
from fastapi.testclient import TestClient

from service.errors import DB_UNAVAILABLE, database_unavailable
from service.store import crud
from service.store.db import Database, connect
from tests.service.utils import auth, spec, submit


@pytest.fixture
def unreachable(tmp_path: Path) -> Database:
    folder = tmp_path / "gone"
    db = connect(f"sqlite:///{folder / 'smartune.db'}", timeout_s=0.5)
    shutil.rmtree(folder)  # `connect` made the folder; without it SQLite cannot open the file
    return db


def _assert_unavailable(response: Any) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "5"
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"detail": DB_UNAVAILABLE, "field": None}
    assert "Traceback" not in response.text and "sqlite" not in response.text.lower()


def test_every_endpoint_answers_503_while_the_database_is_down(
    client: TestClient, team_key: str, admin_key: str, unreachable: Database
) -> None:
    job_id = submit(client, team_key)["id"]
    for key in (team_key, admin_key):  # verified once: the keys are cached
        assert client.get("/api/v1/keys/me", headers=auth(key)).status_code == 200
    healthy = client.app.state.db  # type: ignore[attr-defined]
    client.app.state.db = unreachable  # type: ignore[attr-defined]
    for key, method, path in [
        (team_key, "POST", "/api/v1/jobs"),
        (team_key, "GET", "/api/v1/jobs"),
        (team_key, "GET", f"/api/v1/jobs/{job_id}"),
        (team_key, "POST", f"/api/v1/jobs/{job_id}/cancel"),
        (team_key, "GET", f"/api/v1/jobs/{job_id}/logs"),
        (team_key, "GET", f"/api/v1/jobs/{job_id}/results"),
        (team_key, "GET", "/api/v1/pool"),
        (team_key, "GET", "/api/v1/pool/queue"),
        (admin_key, "GET", "/api/v1/teams"),
        (admin_key, "POST", "/api/v1/teams"),
        (admin_key, "GET", "/api/v1/teams/nlp"),
        (admin_key, "PATCH", "/api/v1/teams/nlp"),
        (admin_key, "GET", "/api/v1/teams/nlp/keys"),
        (admin_key, "POST", "/api/v1/teams/nlp/keys"),
        (admin_key, "DELETE", "/api/v1/keys/000000000000"),
    ]:
        body = spec() if path == "/api/v1/jobs" else {"name": "speech"} if method == "POST" else {}
        _assert_unavailable(client.request(method, path, headers=auth(key), json=body))
    assert client.get("/api/v1/keys/me", headers=auth(team_key)).status_code == 200  # needs no database
    client.app.state.db = healthy  # type: ignore[attr-defined]
    assert client.get(f"/api/v1/jobs/{job_id}", headers=auth(team_key)).status_code == 200  # recovered


def test_a_key_that_must_be_looked_up_gets_503_not_401(
    client: TestClient, team_key: str, unreachable: Database
) -> None:
    client.app.state.db = unreachable  # type: ignore[attr-defined]
    _assert_unavailable(client.get("/api/v1/jobs", headers=auth(team_key)))
    assert client.get("/api/v1/jobs").status_code == 401  # no key: refused before any lookup


def test_healthz_stays_up_and_readyz_says_the_database_is_down(
    client: TestClient, unreachable: Database, caplog: pytest.LogCaptureFixture
) -> None:
    assert client.get("/readyz").status_code == 200
    client.app.state.db = unreachable  # type: ignore[attr-defined]
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")  # no key: nothing to look up, the probe runs
    assert ready.status_code == 503 and ready.headers["retry-after"] == "5"
    # The body says which, never why (an address, a driver message): that goes to the log.
    assert ready.json() == {"status": "unavailable", "database": "unreachable", "ray": "ok"}
    assert "the database does not answer" in caplog.text


def test_readyz_answers_are_reused_for_a_moment(client: TestClient, unreachable: Database) -> None:
    client.app.state.settings = client.app.state.settings.model_copy(update={"ready_ttl_s": 60})  # type: ignore[attr-defined]
    assert client.get("/readyz").status_code == 200
    client.app.state.db = unreachable  # type: ignore[attr-defined]
    assert client.get("/readyz").status_code == 200  # within the TTL: the last answer, no new check


def test_a_pool_timeout_is_a_503_too(client: TestClient, team_key: str, monkeypatch: Any) -> None:
    def exhausted(**_kw: Any) -> Any:
        raise sqlalchemy.exc.TimeoutError("QueuePool limit of size 10 overflow 30 reached")

    monkeypatch.setattr(crud, "list_jobs", exhausted)
    _assert_unavailable(client.get("/api/v1/jobs", headers=auth(team_key)))


def test_a_wrong_statement_is_a_bug_not_an_outage(
    client: TestClient, team_key: str, monkeypatch: Any
) -> None:
    def broken(**_kw: Any) -> Any:
        raise sqlalchemy.exc.IntegrityError("INSERT ...", {}, Exception("UNIQUE constraint failed: /srv/x"))

    monkeypatch.setattr(crud, "list_jobs", broken)
    response = client.get("/api/v1/jobs", headers=auth(team_key))
    assert response.status_code == 500
    assert response.json() == {"detail": "internal server error", "field": None}
    assert "retry-after" not in response.headers


def test_what_counts_as_unavailable() -> None:
    orig = Exception("server closed the connection unexpectedly")
    assert database_unavailable(sqlalchemy.exc.OperationalError("SELECT 1", {}, orig))
    assert database_unavailable(sqlalchemy.exc.InterfaceError("SELECT 1", {}, orig))
    assert database_unavailable(sqlalchemy.exc.TimeoutError("pool"))
    assert database_unavailable(sqlalchemy.exc.DisconnectionError("gone"))
    invalidated = sqlalchemy.exc.DBAPIError("SELECT 1", {}, orig, connection_invalidated=True)
    assert database_unavailable(invalidated)
    assert not database_unavailable(sqlalchemy.exc.DBAPIError("SELECT 1", {}, orig))
    assert not database_unavailable(sqlalchemy.exc.ProgrammingError("SELEC 1", {}, orig))
    assert not database_unavailable(ValueError("no"))
