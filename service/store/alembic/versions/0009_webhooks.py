"""Webhooks: a team's registered URLs (with their signing secrets), the outbox of events, and one delivery
per event and webhook with its attempts, last answer and next attempt time.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-20
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from service.store.db import UTCDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def _team() -> sa.Column[int]:
    return sa.Column("team_id", sa.Integer(), sa.ForeignKey("teams.id", ondelete="CASCADE"), nullable=False)


def upgrade() -> None:
    op.create_table(
        "webhooks",
        sa.Column("id", sa.Integer(), primary_key=True),
        _team(),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("created_by", sa.String(32), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_webhooks_team_id", "webhooks", ["team_id"])
    op.create_table(
        "webhook_events",
        sa.Column("id", sa.Integer(), primary_key=True),
        _team(),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("dedupe_key", sa.String(64), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_webhook_events_team_id", "webhook_events", ["team_id"])
    op.create_index("ix_webhook_events_created_at", "webhook_events", ["created_at"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "webhook_id", sa.Integer(), sa.ForeignKey("webhooks.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column(
            "event_id", sa.Integer(), sa.ForeignKey("webhook_events.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_attempt_at", UTCDateTime(), nullable=True),
        sa.Column("next_attempt_at", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_webhook_deliveries_webhook_id", "webhook_deliveries", ["webhook_id"])
    op.create_index("ix_webhook_deliveries_event_id", "webhook_deliveries", ["event_id"])
    op.create_index("ix_webhook_deliveries_due", "webhook_deliveries", ["state", "next_attempt_at"])


def downgrade() -> None:
    op.drop_table("webhook_deliveries")  # its indexes go with it
    op.drop_table("webhook_events")
    op.drop_table("webhooks")
