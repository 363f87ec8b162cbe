"""One delivery attempt: the event's JSON body, signed, POSTed to the webhook's URL at the address checked.

The URL is checked again (service.notify.urls: its host resolved once, every address allowed) and the
connection goes to the first address checked, with the URL's host in `Host` and, for https, in the TLS
server name (so the certificate is verified for the name): a DNS answer that changes between the check
and the connection cannot redirect it. No proxy from the environment, no redirects (a 3xx is an answer
that is not 2xx), one short timeout per phase, the answer's body never read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from service.config import Settings
from service.notify import signing, urls

USER_AGENT = "smartune-webhooks/1"


@dataclass(frozen=True)
class Outcome:
    status: int | None  # the answer's HTTP status; None when there was none
    error: str | None  # why the attempt did not deliver; None on a 2xx

    @property
    def delivered(self) -> bool:
        return self.error is None


def body(event_id: int, event_type: str, created_at: str, team: str, data: dict[str, Any]) -> bytes:
    """The envelope every delivery of one event sends, byte for byte the same on every attempt."""
    document = {"id": event_id, "type": event_type, "created_at": created_at, "team": team, "data": data}
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def attempt(
    *,
    url: str,
    secret: str,
    content: bytes,
    event_type: str,
    delivery_id: int,
    settings: Settings,
    resolve: urls.Resolver,
    transport: httpx.BaseTransport | None = None,
) -> Outcome:
    """POST `content` once; what came of it."""
    try:
        target = urls.check(url, settings, resolve)
    except urls.UrlRefused as err:
        return Outcome(None, f"refused: {err}")
    pinned = target.url.copy_with(host=str(target.addresses[0]))
    headers = {
        "Host": target.url.netloc.decode("ascii"),
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "Smartune-Event": event_type,
        "Smartune-Delivery": str(delivery_id),
        signing.HEADER: signing.sign(secret, content),  # signed now: a retry carries a fresh timestamp
    }
    tls = {"sni_hostname": target.url.raw_host.decode("ascii")} if target.url.scheme == "https" else {}
    timeout = httpx.Timeout(settings.webhook_timeout_s)
    try:
        with (
            httpx.Client(
                transport=transport, timeout=timeout, follow_redirects=False, trust_env=False
            ) as client,
            client.stream("POST", pinned, content=content, headers=headers, extensions=tls) as answer,
        ):
            status = answer.status_code
    except httpx.HTTPError as err:
        return Outcome(None, f"{type(err).__name__}: {err}"[:500])
    return Outcome(status, None if 200 <= status < 300 else f"HTTP {status}")
