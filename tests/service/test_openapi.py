"""The OpenAPI document is complete (every route, examples on the submit body, bearer auth) and `/` is the
placeholder page that points at it."""

from __future__ import annotations

from fastapi.testclient import TestClient


def test_openapi_lists_every_route_with_auth_and_examples(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    paths = doc["paths"]
    for path in [
        "/api/v1/jobs",
        "/api/v1/jobs/{job_id}",
        "/api/v1/jobs/{job_id}/cancel",
        "/api/v1/jobs/{job_id}/logs",
        "/api/v1/jobs/{job_id}/results",
        "/api/v1/pool",
        "/api/v1/pool/queue",
        "/api/v1/teams",
        "/api/v1/teams/{name}",
        "/api/v1/teams/{name}/keys",
        "/api/v1/keys/me",
        "/api/v1/keys/{key_id}",
        "/healthz",
        "/readyz",
    ]:
        assert path in paths, path
    submit = paths["/api/v1/jobs"]["post"]
    examples = submit["requestBody"]["content"]["application/json"]["examples"]
    assert {"quick", "paper-grid"} <= set(examples)
    assert {"201", "200", "409", "413", "422"} <= set(submit["responses"])
    assert submit["parameters"][0]["name"] == "idempotency-key"
    assert doc["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert "security" not in paths["/healthz"]["get"]
    assert all(op.get("description") or op.get("summary") for p in paths.values() for op in p.values())


def test_home_page_points_at_the_api_docs(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert 'href="/docs"' in page.text and "/api/v1" in page.text
