"""Webhooks in the SDK: the `Client` calls that register, list and delete a team's webhooks and read their
deliveries, and `verify`, the receiver's check of a delivery's `Smartune-Signature` (docs/webhooks.md).

    ok = smartune.webhooks.verify(secret, request_body, request.headers["Smartune-Signature"])
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from smartune._http import Http

TOLERANCE_S = 300.0  # a signature older (or newer) than five minutes is refused: a replay


def verify(
    secret: str, body: bytes, header: str, *, tolerance_s: float = TOLERANCE_S, now: float | None = None
) -> bool:
    """Whether `header` (`t=<unix seconds>,v1=<hex>`) is the HMAC-SHA256 of `"<t>." + body` under the
    webhook's `secret`, made within `tolerance_s` of `now` (default: the clock). `body`: the raw bytes."""
    fields: dict[str, str] = {}
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        fields.setdefault(name, value)
    try:
        stamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - stamp) > tolerance_s:
        return False
    expected = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, fields.get("v1", ""))


class WebhookCalls:
    """The webhook calls of `smartune.Client` (a team's key; an admin key lists and deletes every team's)."""

    _http: Http

    def add_webhook(self, url: str, events: Iterable[str] | None = None) -> dict[str, Any]:
        """Register a webhook of the key's team for `events` (default: job.succeeded, job.failed,
        job.lost). The answer's `secret` signs every delivery and is shown this once: keep it."""
        body: dict[str, Any] = {"url": url}
        if events is not None:
            body["events"] = list(events)
        created: dict[str, Any] = self._http.request("POST", "/webhooks", json=body).json()
        return created

    def webhooks(self) -> list[dict[str, Any]]:
        """The team's webhooks (every team's for an admin key): id, url, events; never the secrets."""
        return list(self._http.request("GET", "/webhooks").json()["data"])

    def delete_webhook(self, webhook_id: int) -> dict[str, Any]:
        """Delete a webhook (its pending deliveries are dropped); return what was deleted."""
        deleted: dict[str, Any] = self._http.request("DELETE", f"/webhooks/{int(webhook_id)}").json()
        return deleted

    def webhook_deliveries(self, webhook_id: int, limit: int | None = None) -> list[dict[str, Any]]:
        """A webhook's latest deliveries, newest first: event, state, attempts, last HTTP status or error,
        next attempt time."""
        params = {"limit": limit} if limit is not None else None
        answer = self._http.request("GET", f"/webhooks/{int(webhook_id)}/deliveries", params=params)
        return list(answer.json()["data"])
