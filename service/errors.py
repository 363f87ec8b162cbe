"""One error body for every client mistake: `{"detail": ..., "field": ...}`, plus `errors` for a 422.

`ApiError` is what the service raises on purpose; the handlers below turn it, FastAPI's validation errors
and Starlette's HTTP errors (404 route, 405, 413) into that body. A database that cannot be reached, times
out or drops the connection (SQLAlchemy's OperationalError, InterfaceError, a pool timeout, an invalidated
connection) is a 503 with `Retry-After`: the client may simply try again. Every 429 and 503 says when to
retry (`Retry-After`), and a 405 lists every method of its path (`Allow`). Anything else is a bug: a 500
with a generic message, logged with its traceback; no answer carries a traceback or a driver's text. The
bodies are declared as models here (`ErrorBody`, `ValidationErrorBody`) so the OpenAPI document describes
exactly what the handlers send.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

logger = logging.getLogger(__name__)


class ErrorBody(BaseModel):
    """Every 4xx answer: what is wrong and, when one field is to blame, its dotted path."""

    detail: str
    field: str | None = Field(None, description="the dotted path of the field at fault, if one is")


class FieldError(BaseModel):
    field: str | None = Field(description="dotted path: `training.epochs`, `query.limit`, `header.x`")
    msg: str
    type: str | None = Field(None, description="a machine-readable kind: missing, int_parsing, ...")


class ValidationErrorBody(ErrorBody):
    """A 422: `detail` and `field` repeat the first of `errors`, which lists every mistake found."""

    errors: list[FieldError]


class TooLargeBody(ErrorBody):
    """A 413: the body was larger than `limit_bytes` (absent when the limit is not the body's size)."""

    limit_bytes: int | None = None


DB_RETRY_AFTER_S = 5  # a restarted database or a released lock: worth another try in a few seconds


class ApiError(StarletteHTTPException):
    def __init__(
        self,
        status_code: int,
        detail: str,
        *,
        field: str | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(status_code=status_code, detail=detail, headers=headers)
        self.field = field
        self.extra = extra  # more members of the body (a budget refusal's numbers)


def not_found(what: str, ident: str) -> ApiError:
    return ApiError(404, f"{what} {ident!r} not found")


def field_path(loc: Sequence[Any]) -> str | None:
    """`("body", "training", "epochs")` -> `training.epochs`; `("query", "limit")` -> `query.limit`."""
    parts = [str(p) for p in loc]
    if parts and parts[0] == "body":
        parts = parts[1:]
    return ".".join(parts) or None


def _error_entry(error: dict[str, Any]) -> dict[str, Any]:
    return {
        "field": field_path(error.get("loc", ())),
        "msg": str(error.get("msg", "")),
        "type": error.get("type"),
    }


def validation_body(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """The 422 body for pydantic-style errors (`loc`, `msg`, `type`)."""
    entries = [_error_entry(e) for e in errors] or [{"field": None, "msg": "invalid request", "type": None}]
    first = entries[0]
    detail = f"{first['field']}: {first['msg']}" if first["field"] else str(first["msg"])
    return {"detail": detail, "field": first["field"], "errors": entries}


async def _validation_handler(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    if (
        errors and errors[0].get("type") == "json_invalid"
    ):  # a body FastAPI could not parse: not a field's fault
        why = (errors[0].get("ctx") or {}).get("error", "malformed")
        return JSONResponse({"detail": f"the body is not valid JSON: {why}", "field": None}, status_code=400)
    return JSONResponse(validation_body(errors), status_code=422)


RETRY_AFTER_S = {429: 30, 503: DB_RETRY_AFTER_S}  # when the raiser named no wait (a full queue: 429)


METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> str | None:
    """Every method some route serves at this path (Starlette names only the first route's, while the
    service serves GET and POST of one path by two routes; RFC 9110 wants the resource's in `Allow`)."""
    routes = request.app.router.routes
    allowed = [
        method
        for method in METHODS
        if any(route.matches({**request.scope, "method": method})[0] == Match.FULL for route in routes)
    ]
    return ", ".join(allowed) or None


async def _http_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    field = getattr(exc, "field", None)
    body: dict[str, Any] = {**(getattr(exc, "extra", None) or {}), "detail": exc.detail, "field": field}
    if exc.status_code == 422:  # a check of the service's own (limits, paths): the same shape as pydantic's
        msg = str(exc.detail).removeprefix(f"{field}: ") if field else str(exc.detail)
        body["errors"] = [{"field": field, "msg": msg, "type": "value_error"}]
    headers = dict(exc.headers or {})
    if exc.status_code == 405 and (allow := allowed_methods(request)):
        headers["Allow"] = allow
    if exc.status_code in RETRY_AFTER_S and not any(h.lower() == "retry-after" for h in headers):
        headers["Retry-After"] = str(RETRY_AFTER_S[exc.status_code])  # every 429 and 503 says when to retry
    return JSONResponse(body, status_code=exc.status_code, headers=headers or None)


DB_UNAVAILABLE = "the database is unavailable; try again in a few seconds"
_UNAVAILABLE = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.TimeoutError,
    sa_exc.DisconnectionError,
)


def database_unavailable(err: BaseException) -> bool:
    """Whether `err` says the database cannot be reached now (not that a statement is wrong: a bug)."""
    if isinstance(err, _UNAVAILABLE):
        return True
    return isinstance(err, sa_exc.DBAPIError) and bool(err.connection_invalidated)


def unavailable_response() -> JSONResponse:
    return JSONResponse(
        {"detail": DB_UNAVAILABLE, "field": None},
        status_code=503,
        headers={"Retry-After": str(DB_RETRY_AFTER_S)},
    )


async def _database_handler(request: Request, exc: Exception) -> JSONResponse:
    if not database_unavailable(exc):  # an integrity or programming error: a bug, not an outage
        return await _unexpected_handler(request, exc)
    first = str(getattr(exc, "orig", None) or exc).strip().splitlines()[:1]
    logger.warning(
        "database unavailable on %s %s: %s: %s",
        request.method,
        request.url.path,
        type(exc).__name__,
        first[0][:300] if first else "",
    )
    return unavailable_response()


async def _unexpected_handler(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse({"detail": "internal server error", "field": None}, status_code=500)


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_handler)
    app.add_exception_handler(StarletteHTTPException, _http_handler)
    for kind in (sa_exc.DBAPIError, sa_exc.TimeoutError, sa_exc.DisconnectionError):
        app.add_exception_handler(kind, _database_handler)
    app.add_exception_handler(Exception, _unexpected_handler)
