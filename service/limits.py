"""Request size limit as pure ASGI middleware: a body larger than `max_bytes` gets a 413 in the usual
error body, whether its Content-Length says so up front or a chunked stream runs past the limit. A POST to one
of `own_limit` (a dataset upload) is left to its route, which applies a larger limit of its own."""

from __future__ import annotations

import json

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import ApiError

TOO_LARGE = "Content Too Large"


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int, own_limit: frozenset[str] = frozenset()) -> None:
        self.app, self.max_bytes, self.own_limit = app, max_bytes, own_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"] == "POST" and scope["path"] in self.own_limit):
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await _reject(send, self.max_bytes)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:  # the route's body reader re-raises it; the handler answers
                    raise ApiError(413, TOO_LARGE)
            return message

        await self.app(scope, limited, send)


async def _reject(send: Send, limit: int) -> None:
    body = json.dumps({"detail": TOO_LARGE, "field": None, "limit_bytes": limit}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})
