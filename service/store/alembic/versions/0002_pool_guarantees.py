"""Pool guarantees: CPU quotas, a team's maximum priority and data roots, per-team MLflow experiments,
summaries fetched again after a job ended, and the engine's lease.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from service.store.db import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("teams") as teams:
        teams.add_column(sa.Column("cpu_quota", sa.Float(), nullable=True))
        teams.add_column(sa.Column("max_priority", sa.Integer(), nullable=False, server_default="0"))
        teams.add_column(sa.Column("data_roots", sa.JSON(), nullable=True))
    with op.batch_alter_table("jobs") as jobs:
        jobs.add_column(sa.Column("mlflow_experiment", sa.String(255), nullable=True))
        jobs.add_column(sa.Column("summary_pending", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_table(
        "leases",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(128), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("leases")
    with op.batch_alter_table("jobs") as jobs:
        jobs.drop_column("summary_pending")
        jobs.drop_column("mlflow_experiment")
    with op.batch_alter_table("teams") as teams:
        teams.drop_column("data_roots")
        teams.drop_column("max_priority")
        teams.drop_column("cpu_quota")
