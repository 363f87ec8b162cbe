"""The job store's tables (SQLAlchemy 2 typed models): teams, API keys, jobs, attempts, trials, transitions.

The database is the source of truth; Ray only executes. A job moves QUEUED -> DISPATCHED -> RUNNING ->
SUCCEEDED | FAILED | CANCELLED; a job whose Ray job vanished becomes LOST and is QUEUED again as its next
attempt. Every change of state is a `Transition` row with its reason. Schema changes go through Alembic
(`service/store/alembic/versions`), never `create_all`.
"""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from service.store.db import Base, UTCDateTime, utcnow


class JobState(enum.StrEnum):
    QUEUED = "QUEUED"
    DISPATCHED = "DISPATCHED"  # handed to Ray, not yet running
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    LOST = "LOST"  # its Ray job vanished (head restart); passes straight back to QUEUED


ACTIVE_STATES = (JobState.DISPATCHED, JobState.RUNNING)
FINAL_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


class JobKind(enum.StrEnum):
    SWEEP = "sweep"
    AUDIT = "audit"


class AttemptState(enum.StrEnum):
    SUBMITTING = "SUBMITTING"  # recorded before the Ray call: a restart re-submits the same id
    SUBMITTED = "SUBMITTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"
    LOST = "LOST"


class Team(Base):
    __tablename__ = "teams"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    gpu_quota: Mapped[float | None] = mapped_column(Float)  # None: the deployment's default quota
    cpu_quota: Mapped[float | None] = mapped_column(Float)  # None: the deployment's default quota
    max_concurrent_jobs: Mapped[int | None] = mapped_column(Integer)  # None: the configured default
    weight: Mapped[float] = mapped_column(Float, default=1.0)  # fair-share weight
    default_priority: Mapped[int] = mapped_column(Integer, default=0)
    max_priority: Mapped[int] = mapped_column(Integer, default=0)  # set by an admin; jobs may not exceed it
    # Folders the team's local data and model paths may lie under, beside the deployment's own roots.
    data_roots: Mapped[list[str] | None] = mapped_column(JSON)
    # Device-hour budgets over a rolling period (service.costs.budget); None: no budget of that kind.
    gpu_hours_budget: Mapped[float | None] = mapped_column(Float)  # GPU-hours (GPUs per trial x hours)
    cpu_hours_budget: Mapped[float | None] = mapped_column(Float)  # CPU-hours, of trials without GPUs
    budget_period_days: Mapped[float | None] = mapped_column(Float)  # None: SMARTUNE_BUDGET_PERIOD_DAYS
    # Disk (service.storage): bytes of datasets, checkpoints and artifacts; None: the deployment's default
    storage_quota_bytes: Mapped[int | None] = mapped_column(BigInteger)
    checkpoint_retention_days: Mapped[float | None] = mapped_column(Float)  # None: the deployment's
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(primary_key=True)
    key_id: Mapped[str] = mapped_column(String(32), unique=True)  # the public prefix of the key
    digest: Mapped[str] = mapped_column(String(64))  # SHA-256 of the whole key, hex
    team_id: Mapped[int | None] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    name: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    team: Mapped[Team | None] = relationship(lazy="joined")


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("team_id", "idempotency_key", name="uq_jobs_team_idempotency_key"),
        Index("ix_jobs_state_queued_at", "state", "queued_at"),
        Index("ix_jobs_team_created", "team_id", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"))
    name: Mapped[str | None] = mapped_column(String(200))
    state: Mapped[str] = mapped_column(String(16), default=JobState.QUEUED)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    spec_json: Mapped[str] = mapped_column(Text)  # the canonical JSON the driver receives
    spec_hash: Mapped[str] = mapped_column(String(64), index=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    # The spec's hash as the client sent it, before pinning (service.jobs): an Idempotency-Key replay is
    # compared with it. None on jobs submitted before it was kept (their spec_hash is compared instead).
    request_hash: Mapped[str | None] = mapped_column(String(64))
    n_trials: Mapped[int] = mapped_column(Integer)
    cpus_per_trial: Mapped[float] = mapped_column(Float)
    gpus_per_trial: Mapped[float] = mapped_column(Float)
    max_concurrent_trials: Mapped[int] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer, default=0)  # number of the latest attempt; 0 = none yet
    wait_reason: Mapped[str | None] = mapped_column(String(300))
    message: Mapped[str | None] = mapped_column(Text)
    cleanup_pending: Mapped[bool] = mapped_column(Boolean, default=False)  # cancelled: Ray/MLflow to end
    mlflow_experiment: Mapped[str | None] = mapped_column(String(255))  # the team's experiment (by name)
    mlflow_experiment_id: Mapped[str | None] = mapped_column(String(64))
    mlflow_parent_run_id: Mapped[str | None] = mapped_column(String(64))
    summary: Mapped[dict[str, object] | None] = mapped_column(JSON)
    # The job ended but MLflow could not be read then: its summary and trials are fetched again later.
    summary_pending: Mapped[bool] = mapped_column(Boolean, default=False)
    best_value: Mapped[float | None] = mapped_column(Float)
    # "sweep" (a job spec), or "audit": re-runs of `audit_of`'s recorded trials (service.audits), queued,
    # scheduled and charged like any job; its summary is the audit report.
    kind: Mapped[str] = mapped_column(String(16), default=JobKind.SWEEP, server_default=JobKind.SWEEP)
    audit_of: Mapped[str | None] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    # The plan at submission (service.costs.estimate) and what the job used: device-hours in `device_unit`
    # (gpu-hours when its trials reserve GPUs, else cpu-hours). The actual is set when it ends.
    estimate: Mapped[dict[str, object] | None] = mapped_column(JSON)
    device_unit: Mapped[str | None] = mapped_column(String(16))
    estimated_hours: Mapped[float | None] = mapped_column(Float)
    actual_hours: Mapped[float | None] = mapped_column(Float)
    # Checkpoint retention (service.storage.retention): "pruned" (all but the kept checkpoints deleted)
    # or "expired" (all deleted), at `retention_at`; a job that ends again later (a retry) is pruned again.
    retention_step: Mapped[str | None] = mapped_column(String(16))
    retention_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    queued_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)  # FIFO key; kept on requeue
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    team: Mapped[Team] = relationship(lazy="joined")

    @property
    def footprint_gpus(self) -> float:
        """GPUs the job holds at its peak: concurrent trials times GPUs per trial."""
        return self.gpus_per_trial * min(self.max_concurrent_trials, self.n_trials)

    @property
    def footprint_cpus(self) -> float:
        return self.cpus_per_trial * min(self.max_concurrent_trials, self.n_trials)

    @property
    def submission_id(self) -> str | None:
        return submission_id(self.id, self.attempt) if self.attempt else None


def submission_id(job_id: str, attempt: int) -> str:
    """The Ray submission id of one attempt: a requeued job never collides with its earlier attempt."""
    return f"{job_id}-a{attempt}"


class Attempt(Base):
    __tablename__ = "attempts"
    __table_args__ = (UniqueConstraint("job_id", "number", name="uq_attempts_job_number"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    submission_id: Mapped[str] = mapped_column(String(64), unique=True)  # never dispatched twice
    state: Mapped[str] = mapped_column(String(16), default=AttemptState.SUBMITTING)
    ray_status: Mapped[str | None] = mapped_column(String(16))
    message: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    submitted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Trial(Base):
    __tablename__ = "trials"
    __table_args__ = (UniqueConstraint("job_id", "trial_id", name="uq_trials_job_trial"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    trial_id: Mapped[str] = mapped_column(String(128))
    attempt: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))  # PENDING / RUNNING / TERMINATED / ERROR / STOPPED
    error_class: Mapped[str | None] = mapped_column(String(16))
    params: Mapped[dict[str, object]] = mapped_column(JSON, default=dict)
    mlflow_run_id: Mapped[str | None] = mapped_column(String(64))
    best_score: Mapped[float | None] = mapped_column(Float)
    last_epoch: Mapped[int | None] = mapped_column(Integer)
    metrics: Mapped[dict[str, float]] = mapped_column(JSON, default=dict)  # latest value of each metric
    wall_s: Mapped[float | None] = mapped_column(Float)  # its MLflow run's start to end (or to now), seconds
    calibrated: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())  # counted once
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)


class Transition(Base):
    __tablename__ = "job_transitions"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    from_state: Mapped[str | None] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    reason: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Lease(Base):
    """A named lease in the job store: among several control-plane replicas, only the holder of the
    `engine` lease schedules and dispatches (two engines would over-admit). Renewed every round."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(128))
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)


class CalibrationRow(Base):
    """A measured training cost on this deployment (service.costs): the mean over finished trials of
    seconds per training example for one model x method x max_seq_length x device ("cpu" or a GPU's name)."""

    __tablename__ = "calibration"
    __table_args__ = (
        UniqueConstraint("model", "method", "max_seq_length", "device", name="uq_calibration_key"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    model: Mapped[str] = mapped_column(String(255))
    method: Mapped[str] = mapped_column(String(64))
    max_seq_length: Mapped[int] = mapped_column(Integer)
    device: Mapped[str] = mapped_column(String(128))
    train_s_per_example: Mapped[float] = mapped_column(Float)
    threads: Mapped[int | None] = mapped_column(Integer)
    batch_size: Mapped[int | None] = mapped_column(Integer)
    samples: Mapped[int] = mapped_column(Integer, default=0)  # trials averaged in (the weight is capped)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)


class Dataset(Base):
    """One version of a team's uploaded dataset (service.datasets). Its files lie in the dataset store under
    their content address, `sha256/<digest>/...`; uploading the same name again with other content adds
    version n+1, with the same content returns this row. `published`: every team may read it."""

    __tablename__ = "datasets"
    __table_args__ = (UniqueConstraint("team_id", "name", "version", name="uq_datasets_team_name_version"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    version: Mapped[int] = mapped_column(Integer)  # 1, 2, ... per (team, name)
    digest: Mapped[str] = mapped_column(String(64), index=True)  # SHA-256 hex of the manifest text
    task: Mapped[str] = mapped_column(String(32))
    description: Mapped[str | None] = mapped_column(Text)
    # [{"name", "sha256", "bytes"}] sorted by name: the manifest, with sizes
    files: Mapped[list[dict[str, object]]] = mapped_column(JSON)
    rows: Mapped[dict[str, int]] = mapped_column(JSON)  # split -> examples, as training reads them
    size_bytes: Mapped[int] = mapped_column(BigInteger)  # all files together
    published: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_by: Mapped[str | None] = mapped_column(String(32))  # the uploading key's public id
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    team: Mapped[Team] = relationship(lazy="joined")


class DashboardSession(Base):
    """A signed-in dashboard viewer (service.dashboard.auth): the row is the session, so deleting it (logout,
    the key's revocation) ends it at once. The cookie holds a random token; only its SHA-256 is stored."""

    __tablename__ = "dashboard_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # SHA-256 hex of the cookie's token
    api_key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)  # expired rows are purged at login

    api_key: Mapped[ApiKey] = relationship(lazy="joined")


class StorageUsage(Base):
    """A team's measured disk use (service.storage.measure), written by the engine every
    SMARTUNE_STORAGE_REFRESH_S so that no request walks a folder: its Tune checkpoints and local MLflow
    artifacts in bytes. Its datasets are summed from their rows at each check instead (exact at once)."""

    __tablename__ = "storage_usage"

    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), primary_key=True)
    checkpoint_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    artifact_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    measured_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
