"""Webhook signatures: `Smartune-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + body>`, keyed
with the webhook's secret. A receiver recomputes it over the raw body and refuses a stale `t` (a replay):
docs/webhooks.md has the ten lines, and `smartune.webhooks.verify` is the same check in the SDK."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

HEADER = "Smartune-Signature"
SECRET_PREFIX = "whsec_"
TOLERANCE_S = 300  # a receiver's window against replays: 5 minutes


def new_secret() -> str:
    """A webhook's signing secret: 256 random bits, hex, with a recognisable prefix."""
    return SECRET_PREFIX + secrets.token_hex(32)


def digest(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def sign(secret: str, body: bytes, timestamp: int | None = None) -> str:
    """The header's value for `body` sent at `timestamp` (default: now)."""
    t = int(time.time()) if timestamp is None else timestamp
    return f"t={t},v1={digest(secret, t, body)}"


def verify(
    secret: str, body: bytes, header: str, *, now: float | None = None, tolerance_s: float = TOLERANCE_S
) -> bool:
    """Whether `header` signs `body` with `secret` at a time within `tolerance_s` of `now`."""
    fields: dict[str, list[str]] = {}
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        fields.setdefault(name, []).append(value)
    try:
        t = int(fields["t"][0])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - t) > tolerance_s:
        return False
    expected = digest(secret, t, body)
    return any(hmac.compare_digest(expected, given) for given in fields.get("v1", []))
