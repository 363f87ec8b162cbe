"""Disk per team: a storage quota and checkpoint retention days per team, the engine's cached measurement of
each team's checkpoints and MLflow artifacts, and each job's retention step.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-15
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from service.store.db import UTCDateTime

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("teams") as teams:
        teams.add_column(sa.Column("storage_quota_bytes", sa.BigInteger(), nullable=True))
        teams.add_column(sa.Column("checkpoint_retention_days", sa.Float(), nullable=True))
    with op.batch_alter_table("jobs") as jobs:
        jobs.add_column(sa.Column("retention_step", sa.String(16), nullable=True))
        jobs.add_column(sa.Column("retention_at", UTCDateTime(), nullable=True))
    op.create_table(
        "storage_usage",
        sa.Column("team_id", sa.Integer(), sa.ForeignKey("teams.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("checkpoint_bytes", sa.BigInteger(), nullable=False),
        sa.Column("artifact_bytes", sa.BigInteger(), nullable=False),
        sa.Column("measured_at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("storage_usage")
    with op.batch_alter_table("jobs") as jobs:  # SQLite drops a column by copying the table
        jobs.drop_column("retention_at")
        jobs.drop_column("retention_step")
    with op.batch_alter_table("teams") as teams:
        teams.drop_column("checkpoint_retention_days")
        teams.drop_column("storage_quota_bytes")
