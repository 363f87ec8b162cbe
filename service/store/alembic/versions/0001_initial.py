"""Initial schema: teams, API keys, jobs, attempts, trials, job transitions.

Revision ID: 0001
Revises:
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from service.store.db import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "teams",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("gpu_quota", sa.Float(), nullable=True),
        sa.Column("max_concurrent_jobs", sa.Integer(), nullable=True),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("default_priority", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("key_id", sa.String(32), nullable=False, unique=True),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("team_id", sa.Integer(), sa.ForeignKey("teams.id", ondelete="CASCADE"), nullable=True),
        sa.Column("is_admin", sa.Boolean(), nullable=False),
        sa.Column("name", sa.String(200), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("revoked_at", UTCDateTime(), nullable=True),
    )
    op.create_index("ix_api_keys_team_id", "api_keys", ["team_id"])
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("team_id", sa.Integer(), sa.ForeignKey("teams.id", ondelete="CASCADE"), nullable=False),
        sa.Column("name", sa.String(200), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("spec_json", sa.Text(), nullable=False),
        sa.Column("spec_hash", sa.String(64), nullable=False),
        sa.Column("idempotency_key", sa.String(255), nullable=True),
        sa.Column("n_trials", sa.Integer(), nullable=False),
        sa.Column("cpus_per_trial", sa.Float(), nullable=False),
        sa.Column("gpus_per_trial", sa.Float(), nullable=False),
        sa.Column("max_concurrent_trials", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("wait_reason", sa.String(300), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("cleanup_pending", sa.Boolean(), nullable=False),
        sa.Column("mlflow_experiment_id", sa.String(64), nullable=True),
        sa.Column("mlflow_parent_run_id", sa.String(64), nullable=True),
        sa.Column("summary", sa.JSON(), nullable=True),
        sa.Column("best_value", sa.Float(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("queued_at", UTCDateTime(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.UniqueConstraint("team_id", "idempotency_key", name="uq_jobs_team_idempotency_key"),
    )
    op.create_index("ix_jobs_spec_hash", "jobs", ["spec_hash"])
    op.create_index("ix_jobs_state_queued_at", "jobs", ["state", "queued_at"])
    op.create_index("ix_jobs_team_created", "jobs", ["team_id", "created_at"])
    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.String(40), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.String(64), nullable=False, unique=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("ray_status", sa.String(16), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("submitted_at", UTCDateTime(), nullable=True),
        sa.Column("ended_at", UTCDateTime(), nullable=True),
        sa.UniqueConstraint("job_id", "number", name="uq_attempts_job_number"),
    )
    op.create_index("ix_attempts_job_id", "attempts", ["job_id"])
    op.create_table(
        "job_transitions",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.String(40), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("from_state", sa.String(16), nullable=True),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_job_transitions_job_id", "job_transitions", ["job_id"])
    op.create_table(
        "trials",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.String(40), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("trial_id", sa.String(128), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("error_class", sa.String(16), nullable=True),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("mlflow_run_id", sa.String(64), nullable=True),
        sa.Column("best_score", sa.Float(), nullable=True),
        sa.Column("last_epoch", sa.Integer(), nullable=True),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.UniqueConstraint("job_id", "trial_id", name="uq_trials_job_trial"),
    )
    op.create_index("ix_trials_job_id", "trials", ["job_id"])


def downgrade() -> None:
    for table in ("trials", "job_transitions", "attempts", "jobs", "api_keys", "teams"):
        op.drop_table(table)
