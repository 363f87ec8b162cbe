"""The API's pydantic models, by family: `XCreate` / `XUpdate` in, `XPublic` / `XsPublic(data, count)` out.

The job spec itself is `worker.contract.spec.JobSpec` (the contract shared with the sweep driver), not
redefined here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from service.costs.schemas import CostPublic
from service.storage.schemas import StoragePublic
from worker.contract.names import DISPLAY_NAME, no_hidden_character


class Message(BaseModel):
    message: str


class ErrorBody(BaseModel):
    """Every 4xx answer: what is wrong and, when one field is to blame, its dotted path."""

    detail: str
    field: str | None = None
    errors: list[dict[str, Any]] | None = None


class _ORM(BaseModel):
    model_config = ConfigDict(from_attributes=True)


# --- teams and keys ----------------------------------------------------------------------------------


class TeamUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpu_quota: float | None = Field(
        None, ge=0, description="GPUs the team may hold; null = the deployment default"
    )
    cpu_quota: float | None = Field(
        None, ge=0, description="CPUs the team may hold; null = the deployment default"
    )
    max_concurrent_jobs: int | None = Field(None, ge=1, le=100_000, description="null = the service default")
    weight: float = Field(1.0, gt=0, le=1000, description="fair-share weight")
    default_priority: int = Field(0, ge=-100, le=100)
    max_priority: int = Field(
        0, ge=-100, le=100, description="the highest priority the team's jobs may ask for"
    )
    data_roots: list[str] | None = Field(
        None, description="absolute folders the team's local data and model paths may lie under"
    )
    gpu_hours_budget: float | None = Field(None, ge=0, description="GPU-hours per period; null = no limit")
    cpu_hours_budget: float | None = Field(None, ge=0, description="CPU-hours per period; null = no limit")
    budget_period_days: float | None = Field(
        None, gt=0, le=3660, description="the budgets' rolling window; null = SMARTUNE_BUDGET_PERIOD_DAYS"
    )
    storage_quota_bytes: int | None = Field(None, ge=0, le=2**62, description="bytes of datasets, Tune "
        "checkpoints and local MLflow artifacts; null = SMARTUNE_DEFAULT_STORAGE_QUOTA_GB (unset: no limit)")  # fmt: skip
    checkpoint_retention_days: float | None = Field(None, ge=0, le=3660, description="days a finished job "
        "keeps its kept checkpoints; null = SMARTUNE_CHECKPOINT_RETENTION_DAYS")  # fmt: skip

    @field_validator("data_roots")
    @classmethod
    def _absolute_roots(cls, value: list[str] | None) -> list[str] | None:
        for root in value or []:
            if not root.startswith("/"):
                raise ValueError(f"{root!r} is not an absolute path")
        return value

    @model_validator(mode="after")
    def _default_within_max(self) -> TeamUpdate:
        if (
            self.default_priority > self.max_priority
            and {"default_priority", "max_priority"} & self.model_fields_set
        ):
            raise ValueError(
                f"default_priority {self.default_priority} is above max_priority {self.max_priority}"
            )
        return self


class TeamCreate(TeamUpdate):
    name: Annotated[str, DISPLAY_NAME] = Field(
        min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_.-]*$", examples=["nlp"]
    )


class TeamPublic(_ORM):
    id: int
    name: str
    gpu_quota: float | None
    cpu_quota: float | None
    max_concurrent_jobs: int | None
    weight: float
    default_priority: int
    max_priority: int
    data_roots: list[str] | None
    gpu_hours_budget: float | None = None
    cpu_hours_budget: float | None = None
    budget_period_days: float | None = None
    storage_quota_bytes: int | None = None
    checkpoint_retention_days: float | None = None
    storage: StoragePublic | None = Field(None, description="its disk use against the quota in effect")
    created_at: datetime


class TeamsPublic(BaseModel):
    data: list[TeamPublic]
    count: int


class ApiKeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str | None, DISPLAY_NAME] = Field(
        None,
        max_length=200,
        examples=["ci pipeline"],
        description="shown to admins as is, so no control or format character (newlines, bidirectional "
        "overrides, zero-width characters: Unicode Cc, Cf, Cs, Zl, Zp)",
        json_schema_extra=no_hidden_character,
    )
    is_admin: bool = False


class ApiKeyPublic(_ORM):
    key_id: str = Field(description="the public prefix of the key")
    team: str | None
    is_admin: bool
    name: str | None
    created_at: datetime
    revoked_at: datetime | None


class ApiKeyCreated(ApiKeyPublic):
    key: str = Field(description="the key itself: shown this once, only its digest is stored")


class ApiKeysPublic(BaseModel):
    data: list[ApiKeyPublic]
    count: int


class WhoAmI(BaseModel):
    key_id: str
    team: str | None
    is_admin: bool


# --- jobs ----------------------------------------------------------------------------------------------


class TrialPublic(_ORM):
    trial_id: str
    attempt: int
    state: str
    error_class: str | None
    params: dict[str, Any]
    best_score: float | None
    last_epoch: int | None
    metrics: dict[str, float]
    mlflow_run_id: str | None
    mlflow_url: str | None = None


class AttemptPublic(_ORM):
    number: int
    submission_id: str = Field(description="the Ray submission id: <job id>-a<attempt>")
    state: str
    ray_status: str | None
    message: str | None
    created_at: datetime
    submitted_at: datetime | None
    ended_at: datetime | None


class TransitionPublic(_ORM):
    from_state: str | None
    to_state: str
    attempt: int
    reason: str
    at: datetime


class Progress(BaseModel):
    total: int = Field(description="trials the grid expands to (deduplicated cells x seeds x samples)")
    by_state: dict[str, int] = Field(description="synced trials per state")


class JobPublic(BaseModel):
    id: str
    name: str | None
    team: str
    kind: str = Field("sweep", description="sweep (a job spec), or audit (re-runs of another job's trials)")
    audit_of: str | None = Field(None, description="for an audit: the job whose trials it re-runs")
    state: str
    priority: int
    spec_hash: str
    n_trials: int
    cpus_per_trial: float
    gpus_per_trial: float
    attempt: int
    submission_id: str | None = Field(description="the latest attempt's Ray submission id")
    wait_reason: str | None
    message: str | None
    best_value: float | None
    mlflow_experiment_id: str | None
    mlflow_parent_run_id: str | None
    mlflow_url: str | None
    created_at: datetime
    queued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime


class JobSubmitted(JobPublic):
    replayed: bool = Field(False, description="true when the Idempotency-Key matched an earlier submission")
    identical_jobs: list[str] = Field(description="the team's other jobs with the same spec hash")


class JobDetail(JobPublic):
    spec: dict[str, Any]
    progress: Progress
    cost: CostPublic = Field(description="estimated device-hours at submission vs measured")
    trials: list[TrialPublic]
    attempts: list[AttemptPublic]
    transitions: list[TransitionPublic]


class JobsPublic(BaseModel):
    data: list[JobPublic]
    count: int = Field(description="jobs matching the filter, all pages together")


# --- pool ----------------------------------------------------------------------------------------------


class ResourcesPublic(BaseModel):
    cpus: float
    gpus: float


class TeamUsage(BaseModel):
    team: str
    gpus_in_use: float
    gpu_quota: float | None
    cpus_in_use: float
    cpu_quota: float | None
    jobs_running: int
    max_concurrent_jobs: int
    jobs_queued: int
    weight: float
    share: float = Field(description="GPUs in use / weight: lower goes first")
    storage: StoragePublic | None = Field(None, description="its disk use against its storage quota")


class PoolPublic(BaseModel):
    capacity: ResourcesPublic | None = Field(description="the Ray cluster's resources; null if unreachable")
    reserved: ResourcesPublic = Field(description="held by dispatched and running jobs")
    free: ResourcesPublic | None
    teams: list[TeamUsage]


class QueueEntry(BaseModel):
    position: int
    job_id: str | None = Field(description="null for other teams' jobs")
    team: str
    priority: int
    cpus: float
    gpus: float
    queued_at: datetime
    reason: str


class QueuePublic(BaseModel):
    data: list[QueueEntry]
    count: int


# --- health --------------------------------------------------------------------------------------------


class HealthPublic(BaseModel):
    status: str


class ReadyPublic(BaseModel):
    status: str
    database: str
    ray: str


class AuditRequest(BaseModel):
    """Which of a finished job's trials to re-run, and how closely their metrics must agree."""

    model_config = ConfigDict(extra="forbid")

    trials: list[str] | None = Field(
        None,
        min_length=1,
        max_length=20,
        description="Tune trial ids of the job (its trials' `trial_id`); default: the best trial",
    )
    tolerance: float | None = Field(
        None,
        ge=0,
        le=1,
        description="absolute, per metric and epoch; default: exact for CPU trials (deterministic mode), "
        "1e-3 for GPU trials",
    )


class AuditsPublic(BaseModel):
    data: list[JobPublic] = Field(description="the job's audits, newest first (each a job of kind audit)")


class RegisteredModelPublic(BaseModel):
    """A team's registered model of one task (`smartune-<team>-<task>`): every job on the task adds a version;
    the alias `best` names the best dev score among versions scored on the same dev rows."""

    name: str = Field(
        description="load its best with `mlflow.transformers.load_model('models:/<name>@best')`"
    )
    team: str
    task: str
    latest_version: str | None = Field(description="the newest version (the latest job's)")
    best_version: str | None = Field(
        description="the version the alias `best` names; null before a scored one"
    )
    best_score: float | None = Field(
        description="that version's dev score (its job's best trial, at its best epoch)"
    )
    metric: str | None = Field(description="which metric `best_score` is (the task's main metric)")
    best_job_id: str | None = Field(description="the job whose version `best` names")
    mlflow_url: str | None = Field(
        None, description="the model in the MLflow UI, where the API hands out links"
    )


class RegisteredModelsPublic(BaseModel):
    data: list[RegisteredModelPublic]
    count: int
