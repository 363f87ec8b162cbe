"""Uploaded datasets: one row per version of a team's dataset, its content address (SHA-256 of the
manifest), task, files, row counts, size, and whether an admin published it to every team.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-10
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from service.store.db import UTCDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("team_id", sa.Integer(), sa.ForeignKey("teams.id", ondelete="CASCADE"), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("task", sa.String(32), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("rows", sa.JSON(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("published", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("created_by", sa.String(32), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.UniqueConstraint("team_id", "name", "version", name="uq_datasets_team_name_version"),
    )
    op.create_index("ix_datasets_team_id", "datasets", ["team_id"])
    op.create_index("ix_datasets_digest", "datasets", ["digest"])


def downgrade() -> None:
    op.drop_index("ix_datasets_digest", table_name="datasets")
    op.drop_index("ix_datasets_team_id", table_name="datasets")
    op.drop_table("datasets")
