"""Security headers on every response, and CORS closed unless origins are configured.

Every response gets `X-Content-Type-Options: nosniff`, `X-Frame-Options: DENY`, `Referrer-Policy:
no-referrer`, `Cache-Control: no-store` (answers carry tenants' jobs and keys: no proxy or browser cache
may keep them) and a Content-Security-Policy. The API answers JSON and the home page is static HTML, so
the default policy allows nothing at all (`default-src 'none'`, `frame-ancestors 'none'`).

The documentation pages (/docs: Swagger UI, /redoc: ReDoc) are served with a policy of their own
(`docs_policy`), because they load their scripts and styles from the jsDelivr CDN, as FastAPI serves them,
and start with one inline script: that script is allowed by its SHA-256 hash, not by 'unsafe-inline';
inline styles are allowed (both UIs set them). A route that sets its own policy keeps it.
"""

from __future__ import annotations

import base64
import hashlib
import re

from starlette.datastructures import MutableHeaders
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

API_POLICY = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

SECURITY_HEADERS: dict[str, str] = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Content-Security-Policy": API_POLICY,
}

_CDN = "https://cdn.jsdelivr.net"
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def docs_policy(html: str) -> str:
    """The policy of one documentation page: its CDN, its inline scripts by hash, requests to this API."""
    hashes = " ".join(
        f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'"
        for s in _INLINE_SCRIPT.findall(html)
    )
    return "; ".join(
        [
            "default-src 'none'",
            f"script-src {_CDN} {hashes}".strip(),
            f"style-src {_CDN} https://fonts.googleapis.com 'unsafe-inline'",
            "font-src https://fonts.gstatic.com",
            f"img-src 'self' data: {_CDN} https://fastapi.tiangolo.com",
            "connect-src 'self'",
            "worker-src blob:",  # ReDoc renders in a web worker it builds from a blob
            "frame-ancestors 'none'",
            "base-uri 'none'",
            "form-action 'none'",
        ]
    )


INTERNAL_ERROR = b'{"detail":"internal server error","field":null}'


class SecurityHeadersMiddleware:
    """Pure ASGI: adds the headers above to each response that does not set them itself (413s sent by
    the body limit and CORS preflights included). A bug's 500 would be sent by Starlette's outermost
    middleware, past this one: when an exception reaches here before any response started, the generic
    500 is sent here, with the headers, and the exception goes on up to be logged (nothing is sent twice).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        started = False

        async def with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    if name not in headers:
                        headers[name] = value
            await send(message)

        try:
            await self.app(scope, receive, with_headers)
        except Exception:
            if not started:
                await with_headers(
                    {
                        "type": "http.response.start",
                        "status": 500,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(INTERNAL_ERROR)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": INTERNAL_ERROR})
            raise


def cors_options(origins: list[str]) -> dict[str, object]:
    """Starlette's CORSMiddleware for exactly `origins`: bearer keys in a header, never cookies."""
    return {
        "allow_origins": list(origins),
        "allow_methods": ["GET", "POST", "PATCH", "DELETE"],
        "allow_headers": ["Authorization", "Content-Type", "Idempotency-Key", "X-Request-ID"],
        "expose_headers": ["Retry-After", "X-Request-ID"],
        "allow_credentials": False,
        "max_age": 600,
    }


__all__ = ["API_POLICY", "CORSMiddleware", "SecurityHeadersMiddleware", "cors_options", "docs_policy"]
