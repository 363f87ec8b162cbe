"""The error answers each route declares in the OpenAPI document, by status, with the body really sent.

`errors(*KEYED, 404, notes={404: "..."})` gives a route's `responses=`: each status with its model
(`ValidationErrorBody` for 422, `TooLargeBody` for 413, `ErrorBody` otherwise), a description and the
headers it carries. `KEYED` is what every route behind a key can answer whatever it does: 401 (no valid
key), 429 (the rate limit) and 503 (the database is down). tests/service/test_openapi.py checks the
document against real answers: every status a route really sends is declared, with the body sent.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from service.errors import ErrorBody, TooLargeBody, ValidationErrorBody

KEYED = (401, 429, 503)  # every route behind a key: no valid key, rate limited, database down

DESCRIPTIONS: dict[int, str] = {
    400: "the body is not JSON (empty, malformed, not UTF-8, nested too deeply)",
    401: "missing, invalid or revoked API key",
    403: "the key may not do this (an admin key is needed, or a team's key)",
    404: "no such resource visible to the caller",
    409: "conflicts with the resource's state",
    413: "the body is larger than the service accepts",
    415: "the body is not application/json",
    422: "invalid input; `field` names the culprit and `errors` lists every mistake",
    429: "too many requests: the key's (or, without a valid key, the address's) rate limit; wait `Retry-After` seconds",
    503: "the database is unreachable (or times out); wait `Retry-After` seconds",
}

_MODELS: dict[int, type[BaseModel]] = {413: TooLargeBody, 422: ValidationErrorBody}

RETRY_AFTER: dict[str, Any] = {
    "Retry-After": {
        "description": "seconds to wait before trying again",
        "schema": {"type": "integer", "minimum": 1},
    }
}

_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"description": "`Bearer`", "schema": {"type": "string"}}},
    429: RETRY_AFTER,
    503: RETRY_AFTER,
}


def one_of(*models: type[BaseModel]) -> dict[str, Any]:
    """A response's `content` whose JSON body is one of `models` (each named in the components)."""
    refs = [{"$ref": f"#/components/schemas/{m.__name__}"} for m in models]
    return {"application/json": {"schema": {"anyOf": refs}}}


def errors(*codes: int, notes: dict[int, str] | None = None) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route answering `codes` (descriptions in `notes` replace the general ones)."""
    out: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        entry: dict[str, Any] = {
            "model": _MODELS.get(code, ErrorBody),
            "description": (notes or {}).get(code, DESCRIPTIONS[code]),
        }
        if code in _HEADERS:
            entry["headers"] = _HEADERS[code]
        out[code] = entry
    return out
