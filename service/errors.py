"""One error body for every client mistake: `{"detail": ..., "field": ...}` (plus `errors` for 422).

`ApiError` is what the service raises on purpose; the handlers below turn it, FastAPI's validation errors
and Starlette's HTTP errors (404 route, 405, 413) into that body. Anything else is a bug: a 500 with a
generic message, logged with its traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

logger = logging.getLogger(__name__)

_LOC_ROOTS = ("body", "query", "path", "header", "cookie")


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
    return {"field": field_path(error.get("loc", ())), "msg": error.get("msg", ""), "type": error.get("type")}


async def _validation_handler(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [_error_entry(e) for e in exc.errors()]
    first = errors[0] if errors else {"field": None, "msg": "invalid request"}
    detail = f"{first['field']}: {first['msg']}" if first["field"] else str(first["msg"])
    body = {"detail": detail, "field": first["field"], "errors": errors}
    return JSONResponse(body, status_code=422)


async def _http_handler(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    body = {"detail": exc.detail, "field": getattr(exc, "field", None)}
    return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)


async def _unexpected_handler(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse({"detail": "internal server error", "field": None}, status_code=500)


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_handler)
    app.add_exception_handler(StarletteHTTPException, _http_handler)
    app.add_exception_handler(Exception, _unexpected_handler)
