"""The hash of a job's spec as its client sent it, before the service pinned datasets and memory: what an
`Idempotency-Key` replay is compared with (a pin may change between the two requests).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("request_hash", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:  # SQLite drops a column by copying the table
        batch.drop_column("request_hash")
