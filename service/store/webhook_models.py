"""The webhook tables (docs/webhooks.md): a team's registered URLs, the outbox of events, one delivery per
event and webhook.

An event is written in the transaction that records what it tells (a job's transition, an audit's verdict,
a budget threshold: service.store.outbox), with one `WebhookDelivery` per webhook of the team that
subscribed to it, PENDING and due at once. The engine (service.notify.notifier) posts due deliveries off
the request path and records each attempt here, so deliveries survive a restart. Registered on `Base`
beside service.store.models (the Alembic environment imports both); migration 0009.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from service.store.db import Base, UTCDateTime, utcnow


class DeliveryState(enum.StrEnum):
    PENDING = "PENDING"  # due at `next_attempt_at`
    DELIVERED = "DELIVERED"  # a 2xx answer
    FAILED = "FAILED"  # SMARTUNE_WEBHOOK_MAX_ATTEMPTS attempts, none answered 2xx


class Webhook(Base):
    __tablename__ = "webhooks"

    id: Mapped[int] = mapped_column(primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    url: Mapped[str] = mapped_column(String(2048))
    events: Mapped[list[str]] = mapped_column(JSON)  # the event types it receives (service.store.outbox)
    # The HMAC-SHA256 key of its signatures: shown once at creation, kept because every delivery needs it.
    secret: Mapped[str] = mapped_column(String(128))
    created_by: Mapped[str | None] = mapped_column(String(32))  # the creating key's public id
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class WebhookEvent(Base):
    __tablename__ = "webhook_events"

    id: Mapped[int] = mapped_column(primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    type: Mapped[str] = mapped_column(String(32))  # job.succeeded, audit.pass, budget.80, ...
    # Budget events only: `<type>:<unit>`, at most one such event per rolling budget period.
    dedupe_key: Mapped[str | None] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)  # the envelope's `data`
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)


class WebhookDelivery(Base):
    __tablename__ = "webhook_deliveries"
    __table_args__ = (Index("ix_webhook_deliveries_due", "state", "next_attempt_at"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    webhook_id: Mapped[int] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"), index=True)
    event_id: Mapped[int] = mapped_column(ForeignKey("webhook_events.id", ondelete="CASCADE"), index=True)
    state: Mapped[str] = mapped_column(String(16), default=DeliveryState.PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_status: Mapped[int | None] = mapped_column(Integer)  # the last answer's HTTP status
    last_error: Mapped[str | None] = mapped_column(Text)  # why the last attempt got no answer, or a non-2xx
    last_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # PENDING: when it is due (an attempt in flight pushes it past the attempt's longest time, so a
    # control plane killed mid-attempt tries again); None once DELIVERED or FAILED.
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    event: Mapped[WebhookEvent] = relationship(lazy="joined")
