"""`GET /api/v1/schema/jobspec`: the job spec's JSON Schema, without a key, the same as the OpenAPI
document's `JobSpec`, with `method_params` typed per method."""

from __future__ import annotations

from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator

from tests.service.utils import QUICK_SPEC


def test_the_schema_is_served_without_a_key(client: TestClient) -> None:
    response = client.get("/api/v1/schema/jobspec")
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    schema = response.json()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    validator = Draft202012Validator(schema)
    assert validator.is_valid(QUICK_SPEC)
    assert not validator.is_valid({**QUICK_SPEC, "method_params": {"lambda_s": 1.0}})  # vanilla fixes it at 0
    assert not validator.is_valid({**QUICK_SPEC, "training": {"epsilon": 1e-4}})
    smart = next(b["then"] for b in schema["allOf"] if b["if"]["properties"]["method"]["const"] == "smart")
    epsilon = smart["properties"]["method_params"]["properties"]["epsilon"]
    assert epsilon["type"] == "number" and epsilon["minimum"] == 0 and epsilon["description"]


def test_the_openapi_document_types_method_params_the_same_way(client: TestClient) -> None:
    served = client.get("/api/v1/schema/jobspec").json()
    component = client.get("/openapi.json").json()["components"]["schemas"]["JobSpec"]
    assert component["allOf"] == served["allOf"] and component["properties"]["method"]["enum"]
