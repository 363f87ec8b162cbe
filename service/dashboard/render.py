"""Rendering the dashboard's pages: one Jinja2 environment (autoescaped), the pages' security policy, the
static files (the service's own, and Plotly.js from the installed `plotly` package), the HTML error page.

The pages' Content-Security-Policy allows scripts, styles, images and fetches from this origin only:
no inline script or style, no CDN, no frame. Plotly.js would insert its stylesheet as an inline <style>;
the pages link the same rules as a file instead (static/dashboard/plotly.css, generated from the pinned
plotly.js), marked so that Plotly.js inserts nothing.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.resources
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from service.storage.usage import human

PACKAGE = Path(__file__).resolve().parent.parent  # service/
TEMPLATES = PACKAGE / "templates" / "dashboard"
STATIC = PACKAGE / "static" / "dashboard"

PAGE_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",  # Plotly's mode bar draws its icons as data: SVG
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    ]
)
# The job page draws parallel coordinates, which Plotly renders with WebGL through regl; regl builds its
# draw calls with `Function(...)`, so that page alone also allows 'unsafe-eval'. Still no inline script
# or style: injected markup cannot run.
CHART_POLICY = PAGE_POLICY.replace("script-src 'self'", "script-src 'self' 'unsafe-eval'")
PAGE_HEADERS = {
    "Content-Security-Policy": PAGE_POLICY,
    # same-origin, not the API's no-referrer: under no-referrer Chromium sends `Origin: null` with the
    # pages' own form posts, and the forms' same-origin check (auth.check_origin) needs the real origin.
    # Other sites still get no referrer.
    "Referrer-Policy": "same-origin",
}
STATIC_CACHE = "public, max-age=86400"  # no tenant data in these files: browsers may keep them a day


def _when(value: Any) -> str:
    """An ISO timestamp (or datetime) as `YYYY-MM-DD HH:MM:SS UTC`; '' for None."""
    if value is None:
        return ""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return f"{value:%Y-%m-%d %H:%M:%S} UTC"


def _number(value: Any, digits: int = 4) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["num"] = _number
    env.filters["size"] = human  # bytes: `1.10 GB`
    env.globals["urlencode"] = urlencode
    env.globals["asset"] = asset_url
    return env


def render(
    request: Request, name: str, context: dict[str, Any], status_code: int = 200, *, webgl: bool = False
) -> HTMLResponse:
    html = environment().get_template(name).render(request=request, **context)
    headers = {**PAGE_HEADERS, "Content-Security-Policy": CHART_POLICY} if webgl else PAGE_HEADERS
    return HTMLResponse(html, status_code=status_code, headers=headers)


@dataclass(frozen=True)
class Asset:
    body: bytes
    gzipped: bytes
    media_type: str
    etag: str


_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


def _asset(body: bytes, suffix: str) -> Asset:
    digest = hashlib.sha256(body).hexdigest()[:16]
    return Asset(body, gzip.compress(body, 6), _TYPES[suffix], f'"{digest}"')


@lru_cache(maxsize=32)
def own_asset(name: str) -> Asset | None:
    """A file of static/dashboard (a plain name: no folder, no dot-file), or None."""
    path = STATIC / name
    if "/" in name or name.startswith(".") or path.suffix not in _TYPES or not path.is_file():
        return None
    return _asset(path.read_bytes(), path.suffix)


@lru_cache(maxsize=1)
def plotly_asset() -> Asset:
    """plotly.min.js as the `plotly` package installs it (its package_data): read once, gzipped once."""
    path = importlib.resources.files("plotly") / "package_data" / "plotly.min.js"
    return _asset(path.read_bytes(), ".js")


def asset_url(name: str) -> str:
    """A static file's URL with its content hash, so a new version is fetched at once."""
    asset = plotly_asset() if name == "plotly.min.js" else own_asset(name)
    version = asset.etag.strip('"') if asset else "0"
    prefix = "/ui/static/vendor/" if name == "plotly.min.js" else "/ui/static/"
    return f"{prefix}{name}?v={version}"


def serve(request: Request, asset: Asset) -> Response:
    headers = {"ETag": asset.etag, "Cache-Control": STATIC_CACHE, "Vary": "Accept-Encoding"}
    if request.headers.get("if-none-match") == asset.etag:
        return Response(status_code=304, headers=headers)
    if "gzip" in request.headers.get("accept-encoding", ""):
        return Response(
            asset.gzipped, media_type=asset.media_type, headers={**headers, "Content-Encoding": "gzip"}
        )
    return Response(asset.body, media_type=asset.media_type, headers=headers)
