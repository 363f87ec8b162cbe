"""The dashboard's sessions: an API key exchanged for a signed cookie, and the CSRF tokens of its forms.

The cookie never holds the key. It holds the key's public id, a random nonce and an expiry, signed with
HMAC-SHA256 under `SMARTUNE_DASHBOARD_SECRET`; every request looks the key up again, so revoking the key
ends its dashboard sessions at once. The cookie is HttpOnly (no script reads it), SameSite=Strict (no other
site's page sends it), Path=/ui, and Secure when the request came over https (or as configured).

Every form carries a CSRF token: HMAC(secret, "csrf|" + the session's nonce), compared in constant time.
The login form, which has no session yet, is tied the same way to a short-lived pre-login cookie (login
CSRF: a forged login would sign the victim in as the attacker). A POST whose Origin names another site is
refused before either check.

Without a configured secret, development signs with a random one per process (logins end at restart);
production keeps the dashboard off (Settings refuses a set-but-weak secret at start:
service/secret_checks.py).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from fastapi import Request, Response
from sqlalchemy.orm import Session

from service.api.deps import Principal
from service.config import Settings
from service.errors import ApiError
from service.store import crud

COOKIE = "smartune_session"
LOGIN_COOKIE = "smartune_login"  # the pre-login nonce the login form's CSRF token is bound to
COOKIE_PATH = "/ui"
LOGIN_TTL_S = 3600  # seconds a login form stays usable


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Signer:
    """HMAC-SHA256 over a compact JSON payload: `<payload b64>.<signature b64>`."""

    def __init__(self, secret: str) -> None:
        self._key = hashlib.sha256(b"smartune-dashboard|" + secret.encode()).digest()

    def mac(self, message: str) -> str:
        return _b64(hmac.new(self._key, message.encode(), hashlib.sha256).digest())

    def sign(self, payload: dict[str, Any]) -> str:
        body = _b64(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode())
        return f"{body}.{self.mac(body)}"

    def unsign(self, token: str) -> dict[str, Any] | None:
        """The payload of a token this signer made and that has not expired (`exp`, unix s), else None."""
        body, _, signature = token.partition(".")
        if not body or not hmac.compare_digest(signature.encode(), self.mac(body).encode()):
            return None
        try:
            payload = json.loads(_unb64(body))
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(payload, dict) or not isinstance(payload.get("exp"), int | float):
            return None
        return payload if payload["exp"] > time.time() else None

    def csrf(self, purpose: str, nonce: str) -> str:
        return self.mac(f"csrf|{purpose}|{nonce}")

    def check_csrf(self, purpose: str, nonce: str, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(self.csrf(purpose, nonce).encode(), str(token).encode())


@dataclass(frozen=True)
class Viewer:
    """Who looks at the dashboard: the key's principal (the same scope rules as the REST API) and the
    session's nonce, which the CSRF tokens of the pages it is shown are bound to."""

    principal: Principal
    nonce: str
    csrf: str

    @property
    def label(self) -> str:
        who = "admin" if self.principal.is_admin else f"team {self.principal.team_name}"
        return f"{who} · key {self.principal.key_id}"


def signer_of(request: Request) -> Signer:
    signer: Signer | None = request.app.state.dashboard_signer
    if signer is None:
        raise ApiError(
            503,
            "the dashboard is off: this production deployment sets no SMARTUNE_DASHBOARD_SECRET",
            headers={"Retry-After": "3600"},
        )
    return signer


def make_signer(settings: Settings) -> Signer | None:
    if settings.dashboard_secret:
        return Signer(settings.dashboard_secret)
    return Signer(secrets.token_urlsafe(32)) if settings.env == "development" else None


def _secure(request: Request, settings: Settings) -> bool:
    if settings.dashboard_secure_cookie is not None:
        return settings.dashboard_secure_cookie
    return request.url.scheme == "https"


def _set_cookie(
    response: Response, request: Request, settings: Settings, name: str, value: str, ttl: int
) -> None:
    response.set_cookie(
        name,
        value,
        max_age=ttl,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=_secure(request, settings),
    )


def start_login(request: Request, response: Response, settings: Settings) -> str:
    """Set the pre-login cookie; return the login form's CSRF token."""
    signer = signer_of(request)
    nonce = secrets.token_urlsafe(16)
    _set_cookie(response, request, settings, LOGIN_COOKIE, nonce, LOGIN_TTL_S)
    return signer.csrf("login", nonce)


def check_origin(request: Request) -> None:
    """A POST from another site's page is refused: browsers send Origin on every cross-site POST, and
    Sec-Fetch-Site says where the request came from."""
    if request.headers.get("sec-fetch-site") in ("cross-site", "same-site"):
        raise ApiError(403, "cross-site request refused: the form was not sent from this dashboard")
    origin = request.headers.get("origin")
    if origin and origin != "null":
        parts = urlsplit(origin)
        if parts.netloc != request.url.netloc:
            raise ApiError(403, "cross-site request refused: the form was not sent from this dashboard")
    elif origin == "null":
        raise ApiError(403, "cross-site request refused: the request has an opaque origin")


def check_login_csrf(request: Request, token: str | None) -> None:
    check_origin(request)
    nonce = request.cookies.get(LOGIN_COOKIE, "")
    if not nonce or not signer_of(request).check_csrf("login", nonce, token):
        raise ApiError(
            403, "the login form expired or was not sent from this dashboard; reload it", field="csrf"
        )


def principal_of(session: Session, key: str) -> Principal | None:
    row = crud.authenticate(session=session, key=key)
    if row is None:
        return None
    team = row.team
    return Principal(row.key_id, team.id if team else None, team.name if team else None, row.is_admin)


def open_session(request: Request, response: Response, settings: Settings, principal: Principal) -> None:
    """Sign the viewer in: the session cookie, and the pre-login cookie dropped."""
    ttl = int(settings.dashboard_session_ttl_s)
    payload = {"kid": principal.key_id, "n": secrets.token_urlsafe(16), "exp": int(time.time()) + ttl}
    _set_cookie(response, request, settings, COOKIE, signer_of(request).sign(payload), ttl)
    response.delete_cookie(LOGIN_COOKIE, path=COOKIE_PATH)


def close_session(response: Response) -> None:
    response.delete_cookie(COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict")


def viewer_of(request: Request, session: Session) -> Viewer | None:
    """The signed-in viewer, if the cookie is valid and its key still live (one indexed lookup)."""
    token = request.cookies.get(COOKIE)
    if not token:
        return None
    signer = signer_of(request)
    payload = signer.unsign(token)
    if payload is None or not isinstance(payload.get("kid"), str) or not isinstance(payload.get("n"), str):
        return None
    row = crud.get_api_key(session=session, key_id=payload["kid"])
    if row is None or row.revoked_at is not None:
        return None
    team = row.team
    principal = Principal(row.key_id, team.id if team else None, team.name if team else None, row.is_admin)
    return Viewer(principal, payload["n"], signer.csrf("session", payload["n"]))


def login_redirect(request: Request) -> ApiError:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return ApiError(303, "sign in first", headers={"Location": f"/ui/login?next={quote(target, safe='')}"})


def check_csrf(request: Request, viewer: Viewer, token: str | None) -> None:
    check_origin(request)
    if not signer_of(request).check_csrf("session", viewer.nonce, token):
        raise ApiError(403, "missing or wrong CSRF token: reload the page and try again", field="csrf")


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a dashboard path only (no open redirect to another site)."""
    if target and target.startswith("/ui/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/ui/jobs"
