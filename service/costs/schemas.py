"""The API's models of estimates and budgets: a dry run's answer, a job's estimated vs actual hours."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from service.storage.schemas import StorageCheck


class BudgetPublic(BaseModel):
    unit: str = Field(description="gpu-hours (trials with GPUs: GPUs x hours) or cpu-hours")
    period_days: float = Field(description="the rolling window the budget covers")
    estimate: float | None = Field(description="this job's estimated device-hours (null: unknown)")
    budget: float | None = Field(description="the team's budget in `unit` per period; null: none")
    used: float = Field(description="device-hours the team's jobs of the period held (measured)")
    reserved: float = Field(description="what its queued and running jobs are still expected to take")
    left: float | None = Field(description="budget - used - reserved; null without a budget")
    fits: bool = Field(description="false: a submission is refused with 409 and these numbers")
    refusal: str | None = Field(None, description="a dry run: what the submission would be told")


class PlanGroup(BaseModel):
    """Trials that cost the same (same task, model, method, lengths, epochs, data)."""

    trials: int
    task: str
    model: str
    method: str
    max_seq_length: int
    epochs: int
    batch_size: int
    train_examples: int | None = Field(description="per epoch; null: unknown (see the basis)")
    train_examples_basis: str
    eval_examples: int | None
    eval_examples_basis: str
    calibration: dict[str, Any] | None = Field(
        description="the entry used (model, method, max_seq_length, device, threads, source), the `fallback` "
        "by name (null: the exact key), seconds per training and evaluated example, the overhead"
    )
    seconds_per_epoch: float | None
    seconds_per_trial: float | None
    unknown: str | None = Field(description="why this group could not be estimated")
    memory: dict[str, Any] | None = Field(
        None,
        description="trials with GPUs: peak accelerator memory per GPU (`mb`, MiB, margins included), the "
        "predicted allocated peak, the fitted entry used, its basis (measured / scaled / conservative) and notes",
    )


class JobEstimate(BaseModel):
    """`POST /jobs?dry_run=true`: the spec validated as a submission is, nothing created."""

    dry_run: bool = True
    trials: int = Field(description="after deduplication, times search.num_samples")
    cells: int = Field(description="distinct grid cells after deduplication, each seed counted apart")
    samples_per_cell: int
    seeds: int = Field(description="seeds per configuration: `cells` / `seeds` configurations of the grid")
    device: str = Field(description="cpu, a GPU's name, or `gpu` (SMARTUNE_GPU_KIND unset)")
    unit: str
    units_per_trial: float = Field(description="GPUs (or CPUs) a trial reserves")
    device_hours: float | None = Field(
        description="sum over trials of hours x units per trial; null: unknown"
    )
    trial_hours: float | None
    wall_hours: float | None = Field(description="at the concurrency the job will run with")
    concurrency: dict[str, Any]
    groups: list[PlanGroup]
    asha: dict[str, Any] | None = Field(
        description="ASHA's expected epoch fraction and saving (an expectation; budgets charge the full figure)"
    )
    unknown: list[str]
    sampled_axes: list[str] = Field(description="random axes, costed at the spec's base value")
    memory: dict[str, Any] | None = Field(
        None,
        description="trials with GPUs: `per_trial_mb` each reserves per GPU (Ray's gpu_memory_mb), the GPU's "
        "memory, the `gpu_fraction` a trial packs to and `trials_per_gpu` (docs/memory_packing.md)",
    )
    budget: BudgetPublic
    storage: StorageCheck = Field(
        description="the team's storage against its quota, as a submission checks it"
    )


class CostPublic(BaseModel):
    """A job's estimated and actual device-hours (`GET /jobs/{id}`)."""

    unit: str | None
    estimated_hours: float | None = Field(description="the estimate at submission; null: none or unknown")
    actual_hours: float | None = Field(description="measured from the trials' wall time once the job ended")
    measured_hours: float | None = Field(description="measured so far (the actual once the job ended)")
    relative_error: float | None = Field(description="(estimated - actual) / actual")
    expected_with_asha: float | None = None
