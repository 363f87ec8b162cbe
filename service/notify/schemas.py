"""The webhooks API's bodies: a registration, a webhook (with its secret once, at creation), its deliveries."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from service.store.outbox import DEFAULT_EVENTS, EVENTS, EventType
from worker.contract.names import DISPLAY_URL, no_hidden_character


class WebhookCreate(BaseModel):
    """Where to POST which events. The URL must be http(s) and reach a global address (docs/webhooks.md)."""

    model_config = ConfigDict(extra="forbid")

    url: Annotated[str, DISPLAY_URL] = Field(
        min_length=1,
        max_length=2048,
        examples=["https://ci.example.com/hooks/smartune"],
        description="shown to the team and admins as is, so no control or format character (bidirectional "
        "overrides, zero-width characters: Unicode Cc, Cf, Cs, Zl, Zp)",
        json_schema_extra=no_hidden_character,
    )
    events: list[EventType] = Field(
        default_factory=lambda: list(DEFAULT_EVENTS),  # type: ignore[arg-type]
        min_length=1,
        max_length=len(EVENTS),
        description="the event types to receive; default: job.succeeded, job.failed, job.lost",
    )


class WebhookPublic(BaseModel):
    id: int
    team: str
    url: str
    events: list[str]
    created_by: str | None = Field(description="the public id of the key that registered it")
    created_at: datetime


class WebhookCreated(WebhookPublic):
    secret: str = Field(
        description="the HMAC-SHA256 key of the `Smartune-Signature` header: shown this once, never again"
    )


class WebhooksPublic(BaseModel):
    data: list[WebhookPublic]
    count: int


class DeliveryPublic(BaseModel):
    """One event's delivery to one webhook: where its attempts stand."""

    id: int
    event_id: int = Field(description="the envelope's `id`: the same for every webhook and every attempt")
    event: str = Field(description="the event's type")
    state: str = Field(description="PENDING (next_attempt_at says when), DELIVERED (a 2xx) or FAILED")
    attempts: int
    last_status: int | None = Field(description="the last answer's HTTP status; null if none came")
    last_error: str | None = Field(description="why the last attempt did not deliver")
    last_attempt_at: datetime | None
    next_attempt_at: datetime | None
    created_at: datetime


class DeliveriesPublic(BaseModel):
    data: list[DeliveryPublic] = Field(description="newest first")
    count: int = Field(description="all of the webhook's deliveries kept (30 days)")
