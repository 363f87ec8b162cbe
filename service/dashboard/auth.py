"""The dashboard's sessions: an API key exchanged for a server-side session, and the CSRF tokens of its forms.

A session is a row of the job store (service.store.dashboard_sessions): signing in records one for the key,
signing out deletes it, and revoking the key deletes all of the key's, so a cookie saved before either opens
nothing afterwards. The cookie never holds the key: it holds a random token (256 bits) and its HMAC-SHA256
under `SMARTUNE_DASHBOARD_SECRET`; the store keeps only the token's SHA-256. Every page looks the session up
(one indexed query, with its key and team), so an expired session, a revoked key or a logout is seen at
once. The cookie is HttpOnly (no script reads it), SameSite=Strict (no other site's page sends it), Path=/ui,
and Secure when the request came over https (or as configured).

Every form carries a CSRF token: HMAC(secret, "csrf|session|" + the session's id), compared in constant
time. The login form, which has no session yet, is tied the same way to a short-lived pre-login cookie
(login CSRF: a forged login would sign the victim in as the attacker). A POST whose Origin names another
site is refused before either check.

Without a configured secret, development signs with a random one per process (logins end at restart);
production keeps the dashboard off (Settings refuses a set-but-weak secret at start:
service/secret_checks.py).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from fastapi import Request, Response
from sqlalchemy.orm import Session

from service.api.deps import Principal
from service.config import Settings
from service.errors import ApiError
from service.store import crud, dashboard_sessions
from service.store.models import ApiKey

COOKIE = "smartune_session"
LOGIN_COOKIE = "smartune_login"  # the pre-login nonce the login form's CSRF token is bound to
COOKIE_PATH = "/ui"
LOGIN_TTL_S = 3600  # seconds a login form stays usable


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Signer:
    """HMAC-SHA256 under the dashboard's secret: the session cookie's signature and the CSRF tokens."""

    def __init__(self, secret: str) -> None:
        self._key = hashlib.sha256(b"smartune-dashboard|" + secret.encode()).digest()

    def mac(self, message: str) -> str:
        return _b64(hmac.new(self._key, message.encode(), hashlib.sha256).digest())

    def seal(self, token: str) -> str:
        """A session cookie's value: `<token>.<HMAC of it>`."""
        return f"{token}.{self.mac('session|' + token)}"

    def unseal(self, value: str) -> str | None:
        """The token of a cookie value this signer sealed, else None (no database lookup for a forgery)."""
        token, _, signature = value.partition(".")
        if not token or not hmac.compare_digest(signature.encode(), self.mac("session|" + token).encode()):
            return None
        return token

    def csrf(self, purpose: str, nonce: str) -> str:
        return self.mac(f"csrf|{purpose}|{nonce}")

    def check_csrf(self, purpose: str, nonce: str, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(self.csrf(purpose, nonce).encode(), str(token).encode())


@dataclass(frozen=True)
class Viewer:
    """Who looks at the dashboard: the key's principal (the same scope rules as the REST API) and the
    session's id (its row), which the CSRF tokens of the pages it is shown are bound to."""

    principal: Principal
    session_id: str
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


def _principal(row: ApiKey) -> Principal:
    team = row.team
    return Principal(row.key_id, team.id if team else None, team.name if team else None, row.is_admin)


def sign_in(session: Session, key: str, ttl_s: float) -> str | None:
    """Open a session for the live key `key` (purging expired sessions first) and commit; return the
    session's token for the cookie, or None for an unknown, malformed or revoked key. On a write session."""
    row = crud.authenticate(session=session, key=key)
    if row is None:
        return None
    dashboard_sessions.purge_expired(session=session)
    token = secrets.token_urlsafe(32)
    dashboard_sessions.open_session(session=session, key=row, token=token, ttl_s=ttl_s)
    session.commit()
    return token


def sign_out(session: Session, viewer: Viewer) -> None:
    """Delete the viewer's session and commit: its cookie opens nothing any more. On a write session."""
    dashboard_sessions.end_session(session=session, session_id=viewer.session_id)
    session.commit()


def set_session_cookie(request: Request, response: Response, settings: Settings, token: str) -> None:
    """Hand the signed-in viewer its cookie (the sealed token), and drop the pre-login cookie."""
    value = signer_of(request).seal(token)
    _set_cookie(response, request, settings, COOKIE, value, int(settings.dashboard_session_ttl_s))
    response.delete_cookie(LOGIN_COOKIE, path=COOKIE_PATH)


def drop_session_cookie(response: Response) -> None:
    response.delete_cookie(COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict")


def viewer_of(request: Request, session: Session) -> Viewer | None:
    """The signed-in viewer: a validly sealed cookie whose session is in the store, unexpired, and whose key
    is live (one indexed lookup); else None."""
    value = request.cookies.get(COOKIE)
    if not value:
        return None
    signer = signer_of(request)
    token = signer.unseal(value)
    row = dashboard_sessions.live_session(session=session, token=token) if token else None
    if row is None:
        return None
    return Viewer(_principal(row.api_key), row.id, signer.csrf("session", row.id))


def login_redirect(request: Request) -> ApiError:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return ApiError(303, "sign in first", headers={"Location": f"/ui/login?next={quote(target, safe='')}"})


def check_csrf(request: Request, viewer: Viewer, token: str | None) -> None:
    check_origin(request)
    if not signer_of(request).check_csrf("session", viewer.session_id, token):
        raise ApiError(403, "missing or wrong CSRF token: reload the page and try again", field="csrf")


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a dashboard path only (no open redirect to another site)."""
    if target and target.startswith("/ui/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/ui/jobs"
