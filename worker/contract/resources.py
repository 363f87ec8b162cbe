"""What a job asks of the pool per trial (`resources`) and how long and how often it may try (`limits`):
two blocks of the job spec (worker.contract.spec). Pydantic only."""

from __future__ import annotations

import math

from pydantic import Field, field_validator, model_validator

from worker.contract.search import StrictModel

GPU_FRACTION_GRID = 16  # packed fractions are multiples of 1/16: exact in binary and in Ray's 1e-4 units


class Resources(StrictModel):
    cpus: float = Field(1.0, gt=0, le=256, description="CPUs per trial")
    gpus: float = Field(
        0.0, ge=0, le=16, description="GPUs per trial; fractions share a GPU (0.5 = two per GPU)"
    )
    gpu_memory_mb: float | None = Field(
        None,
        gt=0,
        le=16 * 2**20,
        description="accelerator memory (MiB) a trial reserves on each GPU it uses; trials are packed on a "
        "GPU by it (docs/memory_packing.md). Absent with gpus > 0: the control plane estimates it at submission",
        # Absent when unset, as before the field existed: older specs keep their hash.
        exclude_if=lambda value: value is None,
    )

    @field_validator("gpus")
    @classmethod
    def _whole_or_fraction(cls, value: float) -> float:
        if value > 1 and not float(value).is_integer():
            raise ValueError("more than one GPU per trial must be a whole number")
        return value

    @model_validator(mode="after")
    def _memory_needs_gpus(self) -> Resources:
        if self.gpu_memory_mb is not None and self.gpus == 0:
            raise ValueError("gpu_memory_mb needs gpus > 0 (CPU trials are not packed by accelerator memory)")
        return self

    def packed_gpus(self, gpu_memory_mb: float | None) -> float:
        """The GPUs a trial asks Ray for on GPUs of `gpu_memory_mb` MiB each: at least `gpus`, and for a
        trial within one GPU at least its memory's share of the GPU, rounded up to 1/16, so that Ray's
        fraction accounting never puts more memory on a GPU than it has. Whole GPUs stay whole; without
        a memory figure (or the GPU's) the fraction is `gpus` as given."""
        if self.gpus == 0 or self.gpus >= 1 or not self.gpu_memory_mb or not gpu_memory_mb:
            return self.gpus
        share = math.ceil(self.gpu_memory_mb / gpu_memory_mb * GPU_FRACTION_GRID - 1e-9) / GPU_FRACTION_GRID
        return min(1.0, max(self.gpus, share))


class Limits(StrictModel):
    max_concurrent_trials: int = Field(1, ge=1, le=1024)
    time_budget_s: float | None = Field(None, gt=0, description="wall-clock budget of the whole sweep")
    stall_timeout_s: float | None = Field(
        None,
        gt=0,
        description="a trial that reports nothing (no epoch) for this many seconds from its start or its"
        " last report is killed and fails with error class `stalled`; unset: 6 hours until its first"
        " report, then 10x its longest gap between reports and at least 30 minutes",
    )
    max_retries: int = Field(
        1, ge=0, le=10, description="times a failed trial is retried from its checkpoint"
    )
