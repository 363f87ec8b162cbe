"""Estimates and budgets: the teams' device-hour budgets, each job's estimate and actual device-hours, each
trial's wall time, and the calibration table refreshed from finished trials.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from service.store.db import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("teams") as teams:
        teams.add_column(sa.Column("gpu_hours_budget", sa.Float(), nullable=True))
        teams.add_column(sa.Column("cpu_hours_budget", sa.Float(), nullable=True))
        teams.add_column(sa.Column("budget_period_days", sa.Float(), nullable=True))
    with op.batch_alter_table("jobs") as jobs:
        jobs.add_column(sa.Column("estimate", sa.JSON(), nullable=True))
        jobs.add_column(sa.Column("device_unit", sa.String(16), nullable=True))
        jobs.add_column(sa.Column("estimated_hours", sa.Float(), nullable=True))
        jobs.add_column(sa.Column("actual_hours", sa.Float(), nullable=True))
    with op.batch_alter_table("trials") as trials:
        trials.add_column(sa.Column("wall_s", sa.Float(), nullable=True))
        trials.add_column(sa.Column("calibrated", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_table(
        "calibration",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("method", sa.String(64), nullable=False),
        sa.Column("max_seq_length", sa.Integer(), nullable=False),
        sa.Column("device", sa.String(128), nullable=False),
        sa.Column("train_s_per_example", sa.Float(), nullable=False),
        sa.Column("threads", sa.Integer(), nullable=True),
        sa.Column("batch_size", sa.Integer(), nullable=True),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.UniqueConstraint("model", "method", "max_seq_length", "device", name="uq_calibration_key"),
    )


def downgrade() -> None:
    op.drop_table("calibration")
    with op.batch_alter_table("trials") as trials:
        trials.drop_column("calibrated")
        trials.drop_column("wall_s")
    with op.batch_alter_table("jobs") as jobs:
        jobs.drop_column("actual_hours")
        jobs.drop_column("estimated_hours")
        jobs.drop_column("device_unit")
        jobs.drop_column("estimate")
    with op.batch_alter_table("teams") as teams:
        teams.drop_column("budget_period_days")
        teams.drop_column("cpu_hours_budget")
        teams.drop_column("gpu_hours_budget")
