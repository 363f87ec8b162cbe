"""Security headers on every answer, CORS closed unless origins are configured, and the documentation
pages' own Content-Security-Policy (service.http.headers): one test per rule."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from service.config import Settings
from service.http.headers import API_POLICY
from service.main import create_app
from tests.service.fakes import FakeRay, FakeTracker
from tests.service.utils import auth, spec

ORIGIN = "https://ui.example"
PREFLIGHT = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}


def _answers(client: TestClient, team_key: str) -> dict[str, Any]:
    """One answer of each kind: JSON, HTML, each error class, and the body limit's own 413."""
    return {
        "200 json": client.get("/api/v1/jobs", headers=auth(team_key)),
        "200 healthz": client.get("/healthz"),
        "200 openapi": client.get("/openapi.json"),
        "307 home": client.get("/", follow_redirects=False),
        "401": client.get("/api/v1/jobs"),
        "404 route": client.get("/nowhere"),
        "404 job": client.get("/api/v1/jobs/job-x", headers=auth(team_key)),
        "405": client.put("/healthz"),
        "422": client.get("/api/v1/jobs?limit=0", headers=auth(team_key)),
        "413": client.post("/api/v1/jobs", content=b"x" * (65 * 1024), headers=auth(team_key)),
        "201": client.post("/api/v1/jobs", json=spec(), headers=auth(team_key)),
    }


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "no-referrer"),
        ("cache-control", "no-store"),
        ("content-security-policy", API_POLICY),
    ],
)
def test_every_answer_carries_the_security_header(
    client: TestClient, team_key: str, header: str, value: str
) -> None:
    answers = _answers(client, team_key)
    assert answers["413"].status_code == 413 and answers["405"].status_code == 405
    for kind, response in answers.items():
        assert response.headers.get(header) == value, (kind, response.status_code)


def test_the_api_policy_allows_nothing_and_no_framing() -> None:
    directives = dict(d.strip().split(" ", 1) for d in API_POLICY.split(";"))
    assert directives["default-src"] == "'none'" and directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in API_POLICY


def test_no_cors_headers_by_default(client: TestClient, team_key: str) -> None:
    simple = client.get("/api/v1/jobs", headers={**auth(team_key), "Origin": ORIGIN})
    assert simple.status_code == 200
    preflight = client.options("/api/v1/jobs", headers={"Origin": ORIGIN, **PREFLIGHT})
    assert preflight.status_code == 405  # no CORS layer answers it: the route does not take OPTIONS
    for response in (simple, preflight):
        assert not [h for h in response.headers if h.startswith("access-control-")], response.headers


@pytest.fixture
def cors_client(settings: Settings, fake_ray: FakeRay, fake_tracker: FakeTracker) -> Iterator[TestClient]:
    configured = settings.model_copy(update={"cors_allow_origins": [ORIGIN]})
    app = create_app(configured, ray=fake_ray, tracker=fake_tracker, run_engine=False)
    with TestClient(app) as test_client:
        yield test_client


def test_origins_come_from_a_comma_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SMARTUNE_CORS_ALLOW_ORIGINS", raising=False)
    parsed = Settings.model_validate({"cors_allow_origins": "https://a.example, https://b.example,"})
    assert parsed.cors_allow_origins == ["https://a.example", "https://b.example"]
    assert Settings().cors_allow_origins == []


def test_a_configured_origin_may_call_with_a_bearer_key(cors_client: TestClient) -> None:
    preflight = cors_client.options(
        "/api/v1/jobs",
        headers={
            "Origin": ORIGIN,
            **PREFLIGHT,
            "Access-Control-Request-Headers": "authorization,content-type",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert "Authorization" in preflight.headers["access-control-allow-headers"]
    assert "access-control-allow-credentials" not in preflight.headers  # keys in a header, never cookies
    assert preflight.headers["x-frame-options"] == "DENY"  # the preflight carries the headers too
    simple = cors_client.get("/api/v1/jobs", headers={"Origin": ORIGIN})
    assert simple.status_code == 401 and simple.headers["access-control-allow-origin"] == ORIGIN
    assert "Retry-After" in simple.headers["access-control-expose-headers"]


def test_other_origins_are_refused(cors_client: TestClient) -> None:
    for origin in ("https://evil.example", "https://ui.example.evil.example", "null"):
        preflight = cors_client.options("/api/v1/jobs", headers={"Origin": origin, **PREFLIGHT})
        assert preflight.status_code == 400, origin
        assert "access-control-allow-origin" not in preflight.headers
        simple = cors_client.get("/api/v1/jobs", headers={"Origin": origin})
        assert "access-control-allow-origin" not in simple.headers, origin


def test_only_the_apis_methods_and_headers_are_allowed(cors_client: TestClient) -> None:
    put = cors_client.options(
        "/api/v1/jobs", headers={"Origin": ORIGIN, "Access-Control-Request-Method": "PUT"}
    )
    assert put.status_code == 400
    odd = cors_client.options(
        "/api/v1/jobs", headers={"Origin": ORIGIN, **PREFLIGHT, "Access-Control-Request-Headers": "x-evil"}
    )
    assert odd.status_code == 400


def _directives(policy: str) -> dict[str, list[str]]:
    return {name: rest for name, *rest in (d.split() for d in policy.split(";") if d.strip())}


def _sha256(script: str) -> str:
    return f"'sha256-{base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()}'"


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_pages_policy_allows_what_the_page_loads_and_nothing_inline_but_its_own_script(
    client: TestClient, page: str
) -> None:
    response = client.get(page)
    assert response.status_code == 200 and "text/html" in response.headers["content-type"]
    policy = _directives(response.headers["content-security-policy"])
    scripts = policy["script-src"]
    assert "'unsafe-inline'" not in scripts and "'unsafe-eval'" not in scripts and "*" not in scripts
    inline = re.findall(r"<script(?![^>]*\bsrc=)[^>]*>(.*?)</script>", response.text, re.DOTALL)
    assert all(_sha256(s) in scripts for s in inline)  # by hash: an injected script would not run
    assert len(inline) == (1 if page == "/docs" else 0)  # Swagger UI starts with one, ReDoc with none
    for src in re.findall(r'<script src="([^"]+)"', response.text):
        assert f"{urlsplit(src).scheme}://{urlsplit(src).netloc}" in scripts, src
    for href in re.findall(r'<link[^>]+rel="stylesheet"[^>]+href="([^"]+)"', response.text) + re.findall(
        r'<link[^>]+href="([^"]+)"[^>]+rel="stylesheet"', response.text
    ):
        assert f"{urlsplit(href).scheme}://{urlsplit(href).netloc}" in policy["style-src"], href
    assert policy["default-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
    assert policy["connect-src"] == ["'self'"]  # the page fetches /openapi.json and nothing else
    assert response.headers["x-frame-options"] == "DENY"


def test_a_tampered_docs_script_would_not_match_the_policy(client: TestClient) -> None:
    response = client.get("/docs")
    script = re.findall(r"<script>(.*?)</script>", response.text, re.DOTALL)[0]
    assert _sha256(script + "alert(1)") not in response.headers["content-security-policy"]


def test_a_bugs_500_carries_the_headers_and_no_details(
    client: TestClient, team_key: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from service.store import crud

    def broken(**_kw: Any) -> Any:
        raise RuntimeError("/srv/smartune/secret")

    monkeypatch.setattr(crud, "list_jobs", broken)
    quiet = TestClient(client.app, raise_server_exceptions=False)  # the app's state is the fixture's
    response = quiet.get("/api/v1/jobs", headers=auth(team_key))
    assert response.status_code == 500
    assert response.json() == {"detail": "internal server error", "field": None}
    assert response.headers["content-security-policy"] == API_POLICY
    assert response.headers["x-content-type-options"] == "nosniff"
    assert "unhandled error on GET /api/v1/jobs" in caplog.text  # logged, with its traceback, once
    assert caplog.text.count("unhandled error on") == 1
