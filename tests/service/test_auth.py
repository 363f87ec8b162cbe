"""Keys and isolation: no key, bad key, revoked key, another team's job (404), admin-only endpoints."""

from __future__ import annotations

from fastapi.testclient import TestClient

from service import security
from service.store.db import Database
from tests.service.utils import auth, make_team, spec, submit


def test_probes_need_no_key_and_the_rest_does(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ok", "database": "ok", "ray": "ok"}
    for method, path in [
        ("GET", "/api/v1/jobs"),
        ("POST", "/api/v1/jobs"),
        ("GET", "/api/v1/jobs/job-x"),
        ("GET", "/api/v1/pool"),
        ("GET", "/api/v1/pool/queue"),
        ("GET", "/api/v1/teams"),
    ]:
        response = client.request(method, path)
        assert response.status_code == 401, (method, path)
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.json()["detail"].startswith("missing API key")


def test_malformed_unknown_and_wrong_secret_keys_are_refused(client: TestClient, team_key: str) -> None:
    key_id = security.parse_key_id(team_key)
    forged = f"smt_{key_id}_{'A' * 43}"
    for bad in ["nonsense", "smt_000000000000_" + "x" * 43, forged, team_key + "x"]:
        response = client.get("/api/v1/jobs", headers=auth(bad))
        assert response.status_code == 401, bad
        assert response.json() == {"detail": "invalid or revoked API key", "field": None}
    basic = client.get("/api/v1/jobs", headers={"Authorization": "Basic dXNlcjpwdw=="})
    assert basic.status_code == 401


def test_revoked_key_stops_working_at_once(client: TestClient, admin_key: str, team_key: str) -> None:
    assert client.get("/api/v1/jobs", headers=auth(team_key)).status_code == 200
    key_id = security.parse_key_id(team_key)
    revoked = client.delete(f"/api/v1/keys/{key_id}", headers=auth(admin_key))
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    assert client.get("/api/v1/jobs", headers=auth(team_key)).status_code == 401
    assert client.delete("/api/v1/keys/000000000000", headers=auth(admin_key)).status_code == 404


def test_a_team_never_sees_another_teams_job(client: TestClient, team_key: str, other_key: str) -> None:
    job_id = submit(client, team_key)["id"]
    for method, path in [
        ("GET", f"/api/v1/jobs/{job_id}"),
        ("POST", f"/api/v1/jobs/{job_id}/cancel"),
        ("POST", f"/api/v1/jobs/{job_id}/retry"),
        ("GET", f"/api/v1/jobs/{job_id}/logs"),
        ("GET", f"/api/v1/jobs/{job_id}/results"),
    ]:
        response = client.request(method, path, headers=auth(other_key))
        assert response.status_code == 404, (method, path)
        assert response.json()["detail"] == f"job {job_id!r} not found"
    assert client.get("/api/v1/jobs", headers=auth(other_key)).json()["count"] == 0
    assert client.get(f"/api/v1/jobs/{job_id}", headers=auth(team_key)).json()["state"] == "QUEUED"


def test_other_teams_jobs_are_anonymous_in_the_queue(
    client: TestClient, team_key: str, other_key: str
) -> None:
    mine = submit(client, team_key)["id"]
    submit(client, other_key)
    queue = client.get("/api/v1/pool/queue", headers=auth(team_key)).json()["data"]
    assert {e["job_id"] for e in queue} == {mine, None}


def test_admin_endpoints_need_an_admin_key(client: TestClient, team_key: str) -> None:
    for method, path in [
        ("GET", "/api/v1/teams"),
        ("POST", "/api/v1/teams"),
        ("GET", "/api/v1/teams/nlp"),
        ("PATCH", "/api/v1/teams/nlp"),
        ("POST", "/api/v1/teams/nlp/keys"),
        ("DELETE", "/api/v1/keys/0123456789ab"),
    ]:
        response = client.request(method, path, headers=auth(team_key), json={})
        assert response.status_code == 403, (method, path)


def test_an_admin_sees_every_team_but_cannot_submit_without_a_team(
    client: TestClient, admin_key: str, team_key: str
) -> None:
    job_id = submit(client, team_key)["id"]
    assert client.get(f"/api/v1/jobs/{job_id}", headers=auth(admin_key)).status_code == 200
    response = client.post("/api/v1/jobs", json=spec(), headers=auth(admin_key))
    assert response.status_code == 403 and "no team" in response.json()["detail"]


def test_whoami(client: TestClient, db: Database) -> None:
    key = make_team(db, "speech")
    me = client.get("/api/v1/keys/me", headers=auth(key)).json()
    assert me == {"key_id": security.parse_key_id(key), "team": "speech", "is_admin": False}


def test_keys_are_256_bit_and_only_a_digest_is_stored(
    client: TestClient, db: Database, team_key: str
) -> None:
    from sqlalchemy import text

    with db.engine.connect() as connection:
        stored = [tuple(r) for r in connection.execute(text("SELECT key_id, digest FROM api_keys"))]
    _prefix, key_id, secret = team_key.split("_", 2)
    assert len(secret) == 43  # 32 bytes, url-safe base64
    assert all(team_key not in row and secret not in "".join(row) for row in stored)
    assert (key_id, security.digest(team_key)) in stored
