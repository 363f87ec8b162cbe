"""Audits: a job's kind ("sweep" or "audit") and, for an audit, the job whose trials it re-runs.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        jobs.add_column(sa.Column("kind", sa.String(16), nullable=False, server_default="sweep"))
        jobs.add_column(sa.Column("audit_of", sa.String(40), nullable=True))
        jobs.create_foreign_key("fk_jobs_audit_of", "jobs", ["audit_of"], ["id"], ondelete="CASCADE")
        jobs.create_index("ix_jobs_audit_of", ["audit_of"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        jobs.drop_index("ix_jobs_audit_of")
        jobs.drop_constraint("fk_jobs_audit_of", type_="foreignkey")
        jobs.drop_column("audit_of")
        jobs.drop_column("kind")
