"""The dashboard's sign-in: an API key exchanged for a signed session cookie (HttpOnly, SameSite=Strict,
Secure over https), logout, CSRF on every form, refusals of other sites' posts, revoked keys, the
production refusal of a weak cookie secret, and the pages' security headers."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service.config import Settings
from service.store import crud
from service.store.db import Database
from tests.service.dashboard_utils import csrf_of, logged_in, login

STRONG = "x" * 40


def _cookie_header(response) -> str:  # type: ignore[no-untyped-def]
    return "; ".join(
        v for k, v in response.headers.multi_items() if k == "set-cookie" and "smartune_session" in v
    )


def test_pages_redirect_to_the_login_without_a_session(client: TestClient) -> None:
    response = client.get("/ui/jobs?state=RUNNING", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/login?next=%2Fui%2Fjobs%3Fstate%3DRUNNING"
    assert client.get("/ui/data/jobs").status_code == 401


def test_login_sets_a_signed_httponly_strict_cookie(client: TestClient, team_key: str) -> None:
    response = login(client, team_key)
    assert response.status_code == 303 and response.headers["location"] == "/ui/jobs"
    cookie = _cookie_header(response)
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert "Secure" not in cookie  # plain http here
    assert team_key not in cookie  # the key itself never reaches the browser
    assert client.get("/ui/jobs").status_code == 200


def test_the_cookie_is_secure_over_https(app: FastAPI, team_key: str) -> None:
    with TestClient(app, base_url="https://testserver") as client:
        assert "Secure" in _cookie_header(login(client, team_key))


def test_a_wrong_key_is_refused_with_the_form_again(client: TestClient) -> None:
    response = login(client, "smt_000000000000_" + "A" * 43)
    assert response.status_code == 401 and "unknown, malformed or revoked" in response.text
    assert "smartune_session" not in response.headers.get("set-cookie", "")


def test_login_needs_the_forms_csrf_token(client: TestClient, team_key: str) -> None:
    client.get("/ui/login")
    forged = client.post("/ui/login", data={"csrf": "forged", "key": team_key}, follow_redirects=False)
    assert forged.status_code == 403 and "login form" in forged.text
    fresh = TestClient(client.app)  # no pre-login cookie at all
    assert fresh.post("/ui/login", data={"csrf": "x", "key": team_key}).status_code == 403


def test_posts_from_another_origin_are_refused(client: TestClient, team_key: str) -> None:
    assert login(client, team_key, Origin="https://evil.example").status_code == 403
    logged_in(client, team_key)
    page = client.get("/ui/jobs")
    refused = client.post(
        "/ui/logout", data={"csrf": csrf_of(page.text)}, headers={"Origin": "https://evil.example"}
    )
    assert refused.status_code == 403


def test_logout_needs_csrf_and_ends_the_session(client: TestClient, team_key: str) -> None:
    logged_in(client, team_key)
    assert client.post("/ui/logout", data={"csrf": ""}, follow_redirects=False).status_code == 403
    token = csrf_of(client.get("/ui/jobs").text)
    response = client.post("/ui/logout", data={"csrf": token}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/ui/login"
    assert client.get("/ui/jobs", follow_redirects=False).status_code == 303


def test_a_forms_body_must_be_urlencoded(client: TestClient, team_key: str) -> None:
    logged_in(client, team_key)
    assert client.post("/ui/logout", json={"csrf": "x"}).status_code == 415


def test_a_tampered_cookie_is_no_session(client: TestClient, team_key: str) -> None:
    logged_in(client, team_key)
    value = client.cookies.get("smartune_session")
    assert value
    body, sig = value.split(".")
    client.cookies.clear()
    client.cookies.set("smartune_session", body + "." + sig[::-1], path="/ui")
    assert client.get("/ui/jobs", follow_redirects=False).status_code == 303


def test_revoking_the_key_ends_its_sessions(client: TestClient, db: Database, team_key: str) -> None:
    logged_in(client, team_key)
    with db.write_sessions() as session:
        row = crud.get_api_key(session=session, key_id=team_key.split("_")[1])
        assert row is not None
        crud.revoke_api_key(session=session, key=row)
        session.commit()
    assert client.get("/ui/jobs", follow_redirects=False).status_code == 303


def test_next_never_leaves_the_dashboard(client: TestClient, team_key: str) -> None:
    page = client.get("/ui/login?next=https://evil.example/")
    assert 'name="next" value="/ui/jobs"' in page.text
    response = client.post(
        "/ui/login",
        data={"csrf": csrf_of(page.text), "key": team_key, "next": "//evil.example"},
        follow_redirects=False,
    )
    assert response.headers["location"] == "/ui/jobs"


def test_pages_send_a_strict_policy_and_the_security_headers(client: TestClient, team_key: str) -> None:
    for response in (client.get("/ui/login"), logged_in(client, team_key).get("/ui/jobs")):
        policy = response.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "style-src 'self'" in policy
        assert "unsafe-inline" not in policy and "frame-ancestors 'none'" in policy
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
        assert "<script>" not in response.text and "style=" not in response.text


def test_production_refuses_a_weak_dashboard_secret() -> None:
    good = {"env": "production", "ray_address": None}
    for weak in ("", "changethis", "short-secret"):
        with pytest.raises(ValidationError, match="SMARTUNE_DASHBOARD_SECRET"):
            Settings(**good, dashboard_secret=weak)
    assert Settings(**good, dashboard_secret=STRONG).dashboard_secret == STRONG


def test_production_without_a_secret_keeps_the_dashboard_off(settings: Settings, team_key: str) -> None:
    del team_key
    from service.main import create_app
    from tests.service.fakes import FakeRay, FakeTracker

    prod = settings.model_copy(update={"env": "production", "dashboard_secret": None})
    app = create_app(prod, ray=FakeRay(), tracker=FakeTracker(), run_engine=False)
    with TestClient(app) as client:
        response = client.get("/ui/login")
        assert response.status_code == 503 and "SMARTUNE_DASHBOARD_SECRET" in response.text


def test_a_configured_secret_keeps_sessions_across_restarts(settings: Settings, team_key: str) -> None:
    from service.main import create_app
    from tests.service.fakes import FakeRay, FakeTracker

    fixed = settings.model_copy(update={"dashboard_secret": STRONG})
    with TestClient(create_app(fixed, ray=FakeRay(), tracker=FakeTracker(), run_engine=False)) as first:
        logged_in(first, team_key)
        cookie = first.cookies.get("smartune_session")
    with TestClient(create_app(fixed, ray=FakeRay(), tracker=FakeTracker(), run_engine=False)) as second:
        second.cookies.set("smartune_session", cookie or "", path="/ui")
        assert second.get("/ui/jobs").status_code == 200
