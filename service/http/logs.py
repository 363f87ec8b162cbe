"""Structured logs: every record carries the request it serves and the job it works on.

Two context variables hold them: `request_id`, set by `RequestIdMiddleware` for each HTTP request (the
caller's `X-Request-ID` when it is a sane token, else a fresh one; echoed in the response's `X-Request-ID`),
and `job_id`, set by the routes that take a job id (`bind_job_id`) and by the engine while it dispatches,
watches or syncs one job (`bound_job`). `ContextFilter`, on the handlers, copies both onto every record
(None when unset): uvicorn's access lines are written while the request's task runs, so they carry the
request id too. `configure` installs one handler on the root logger with either formatter:

- JSON (python-json-logger): one object per line, `time` (UTC, ISO 8601), `level`, `logger`, `message`,
  `request_id`, `job_id`, plus `exc_info` when there is a traceback, and `client`, `method`, `path`,
  `status` on uvicorn's access lines;
- text: `time level logger [request_id=... job_id=...]: message`, the bracket only when either is set.

The JSON format is the default in production (`SMARTUNE_LOG_FORMAT` chooses); uvicorn is started without
its own logging config, so its loggers reach the same handler.
"""

from __future__ import annotations

import logging
import re
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from fastapi import Request
from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

REQUEST_ID: ContextVar[str | None] = ContextVar("smartune_request_id", default=None)
JOB_ID: ContextVar[str | None] = ContextVar("smartune_job_id", default=None)

REQUEST_ID_HEADER = "X-Request-ID"
_SANE = re.compile(r"[A-Za-z0-9._-]{1,128}")
CONTEXT_FIELDS = ("request_id", "job_id")
_ACCESS_FIELDS = ("client", "method", "path", "http_version", "status")


def sane(value: str | None) -> bool:
    """An id fit for a log field and a header: 1 to 128 of `[A-Za-z0-9._-]` (no spaces, no newlines)."""
    return value is not None and _SANE.fullmatch(value) is not None


@contextmanager
def bound_job(job_id: str) -> Iterator[None]:
    """Log records emitted inside carry `job_id` (the engine, around the work on one job)."""
    token = JOB_ID.set(job_id)
    try:
        yield
    finally:
        JOB_ID.reset(token)


async def bind_job_id(request: Request) -> None:
    """A router dependency: a route with a `{job_id}` path parameter logs with it (when it is sane). Async,
    so it runs in the request's task and the handler (and its thread-pool calls) inherit it."""
    job_id = request.path_params.get("job_id")
    if isinstance(job_id, str) and sane(job_id):
        JOB_ID.set(job_id)


class RequestIdMiddleware:
    """Pure ASGI, outermost: gives each HTTP request its id (the caller's `X-Request-ID` if sane, else a
    random one), holds it in `REQUEST_ID` for every log record of the request, and sends it back in the
    response's `X-Request-ID`. The variables are set, not reset: each request runs in its own task, and the
    lines logged after the app returns (an unhandled error, the access line) still belong to the request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = Headers(scope=scope).get(REQUEST_ID_HEADER)
        request_id = given if given is not None and sane(given) else uuid.uuid4().hex
        REQUEST_ID.set(request_id)
        JOB_ID.set(None)

        async def with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = request_id
            await send(message)

        await self.app(scope, receive, with_id)


class ContextFilter(logging.Filter):
    """Adds `request_id` and `job_id` (None when unset) to every record, keeping values given as `extra`;
    on uvicorn's access lines, also their parts as fields."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = REQUEST_ID.get()
        if getattr(record, "job_id", None) is None:
            record.job_id = JOB_ID.get()
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            for name, value in zip(_ACCESS_FIELDS, record.args, strict=True):
                if not hasattr(record, name):
                    setattr(record, name, value)
        return True


def json_formatter() -> logging.Formatter:
    """One JSON object per line (python-json-logger)."""
    return JsonFormatter(
        ["levelname", "name", "message", *CONTEXT_FIELDS],
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp="time",
        # uvicorn adds a colored copy of its message, the text format its bracket: not fields
        reserved_attrs=[*RESERVED_ATTRS, "color_message", "context"],
    )


class TextFormatter(logging.Formatter):
    """`time level logger [request_id=... job_id=...]: message` (the bracket only when either is set)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(context)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        given = [f"{name}={value}" for name in CONTEXT_FIELDS if (value := getattr(record, name, None))]
        record.context = f" [{' '.join(given)}]" if given else ""
        return super().formatMessage(record)


def handler(*, json: bool, stream: Any = None) -> logging.Handler:
    """A stream handler (stderr by default) with the context filter and the chosen formatter."""
    out = logging.StreamHandler(stream if stream is not None else sys.stderr)
    out.addFilter(ContextFilter())
    out.setFormatter(json_formatter() if json else TextFormatter())
    return out


def configure(*, json: bool, level: str | int = "INFO") -> logging.Handler:
    """Route every logger (uvicorn's too) to one root handler with the chosen format; return it."""
    root_handler = handler(json=json)
    logging.basicConfig(
        level=level.upper() if isinstance(level, str) else level, handlers=[root_handler], force=True
    )
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers.clear()  # a config installed before (uvicorn's default) would print twice
        uvicorn_logger.propagate = True
    return root_handler


__all__ = [
    "JOB_ID",
    "REQUEST_ID",
    "REQUEST_ID_HEADER",
    "ContextFilter",
    "RequestIdMiddleware",
    "TextFormatter",
    "bind_job_id",
    "bound_job",
    "configure",
    "handler",
    "json_formatter",
    "sane",
]
