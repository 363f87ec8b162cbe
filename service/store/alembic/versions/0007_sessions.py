"""Dashboard sessions kept in the store: one row per signed-in viewer (the SHA-256 of the cookie's token,
its API key, its expiry), deleted at logout and when the key is revoked.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-14
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from service.store.db import UTCDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dashboard_sessions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "api_key_id", sa.Integer(), sa.ForeignKey("api_keys.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_dashboard_sessions_api_key_id", "dashboard_sessions", ["api_key_id"])
    op.create_index("ix_dashboard_sessions_expires_at", "dashboard_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_dashboard_sessions_expires_at", table_name="dashboard_sessions")
    op.drop_index("ix_dashboard_sessions_api_key_id", table_name="dashboard_sessions")
    op.drop_table("dashboard_sessions")
