"""The error answers each route declares in the OpenAPI document, by status, with the body really sent.

`errors(401, 404, 429, notes={404: "..."})` gives a route's `responses=`: each status with its model
(`ValidationErrorBody` for 422, `TooLargeBody` for 413, `ErrorBody` otherwise), a description and the
headers it carries. tests/service/test_openapi.py checks that every route declares what it can answer.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from service.errors import ErrorBody, TooLargeBody, ValidationErrorBody

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
    503: "a dependency (Ray, the database) is unreachable",
}

_MODELS: dict[int, type[BaseModel]] = {413: TooLargeBody, 422: ValidationErrorBody}

_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"description": "`Bearer`", "schema": {"type": "string"}}},
    429: {
        "Retry-After": {
            "description": "seconds until the rate limit lets a request through (rate-limit answers)",
            "schema": {"type": "integer", "minimum": 1},
        }
    },
}


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
