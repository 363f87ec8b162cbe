"""The job spec's search: its axes (grid, choice, uniform, loguniform), the named presets it may start from,
and the algorithm that walks them (grid, random, optuna; ASHA beside any). Pydantic only.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from worker.contract.grid import METHOD_FIELDS, SWEEPABLE, TRAIN_FIELDS
from worker.contract.presets import SEARCH_PRESETS, get_preset


class StrictModel(BaseModel):
    # A misspelt field is an error that names it; a validated spec does not change (its plan is cached).
    model_config = ConfigDict(extra="forbid", frozen=True)


class Axis(StrictModel):
    """One search dimension: grid/choice over `values`, or uniform/loguniform over [low, high]."""

    type: Literal["grid", "choice", "uniform", "loguniform"] = "grid"
    values: list[Any] | None = Field(None, description="grid / choice values")
    low: float | None = Field(None, description="uniform / loguniform lower bound")
    high: float | None = Field(None, description="uniform / loguniform upper bound")

    @model_validator(mode="after")
    def _check(self) -> Axis:
        if self.type in ("grid", "choice"):
            if not self.values:
                raise ValueError(f"a {self.type} axis needs a non-empty 'values' list")
        else:
            if self.low is None or self.high is None or not self.low < self.high:
                raise ValueError(f"a {self.type} axis needs low < high, got low={self.low}, high={self.high}")
            if not (math.isfinite(self.low) and math.isfinite(self.high)):
                raise ValueError(
                    f"a {self.type} axis needs finite bounds, got low={self.low}, high={self.high}"
                )
            if self.type == "loguniform" and self.low <= 0:
                raise ValueError(f"a loguniform axis needs low > 0, got {self.low}")
        return self


class SearchSpace(StrictModel):
    preset: str | None = Field(
        None, description=f"one of {sorted(SEARCH_PRESETS)}", examples=["smart-paper-grid"]
    )
    axes: dict[str, Axis] = Field(
        default_factory=dict, description="field name -> axis; overrides the preset's"
    )

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, value: str | None) -> str | None:
        if value is not None:
            get_preset(value)
        return value

    @field_validator("axes")
    @classmethod
    def _known_fields(cls, axes: dict[str, Axis]) -> dict[str, Axis]:
        """A trial field that no axis sweeps is refused here; a name of no trial field is a custom
        function's own key (worker.contract.function), which only a function job may sweep (JobSpec)."""
        fixed = sorted((set(axes) & (TRAIN_FIELDS | METHOD_FIELDS)) - SWEEPABLE)
        odd = sorted(name for name in axes if not name.isidentifier() or name.startswith("_"))
        if fixed or odd:
            raise ValueError(cannot_sweep(fixed or odd))
        return axes


def cannot_sweep(names: list[str]) -> str:
    return (
        f"cannot sweep {', '.join(names)}; sweepable: {', '.join(sorted(SWEEPABLE))} (a custom-function job, "
        "with `function`, may also sweep keys of its own: identifiers that name no trial field)"
    )


class Asha(StrictModel):
    grace_period: int = Field(1, ge=1, description="epochs every trial runs before it can be stopped")
    reduction_factor: float = Field(2.0, gt=1)


class Search(StrictModel):
    algorithm: Literal["grid", "random", "optuna"] = Field(
        "grid",
        description="grid: every cell (choice axes too), random axes drawn per cell; random: choice axes drawn "
        "too; optuna: Optuna's TPE proposes the sampled axes of one configuration, learning from each result",
    )
    num_samples: int = Field(
        1, ge=1, le=1000, description="samples of the random axes (per grid cell); optuna: trials proposed"
    )
    asha: Asha | None = Field(None, description="early stopping with ASHA; None runs every trial to the end")
