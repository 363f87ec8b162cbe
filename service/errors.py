"""One error body for every client mistake: `{"detail": ..., "field": ...}`, plus `errors` for a 422.

`ApiError` is what the service raises on purpose; the handlers below turn it, FastAPI's validation errors
and Starlette's HTTP errors (404 route, 405, 413) into that body. Anything else is a bug: a 500 with a
generic message, logged with its traceback. The bodies are declared as models here (`ErrorBody`,
`ValidationErrorBody`) so the OpenAPI document describes exactly what the handlers send.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

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


class ApiError(StarletteHTTPException):
    def __init__(
        self,
        status_code: int,
        detail: str,
        *,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(status_code=status_code, detail=detail, headers=headers)
        self.field = field


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


async def _http_handler(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    field = getattr(exc, "field", None)
    body: dict[str, Any] = {"detail": exc.detail, "field": field}
    if exc.status_code == 422:  # a check of the service's own (limits, paths): the same shape as pydantic's
        msg = str(exc.detail).removeprefix(f"{field}: ") if field else str(exc.detail)
        body["errors"] = [{"field": field, "msg": msg, "type": "value_error"}]
    return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)


async def _unexpected_handler(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse({"detail": "internal server error", "field": None}, status_code=500)


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_handler)
    app.add_exception_handler(StarletteHTTPException, _http_handler)
    app.add_exception_handler(Exception, _unexpected_handler)
