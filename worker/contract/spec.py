"""The job spec: the contract between the control plane and the sweep driver (docs/architecture.md §3). Pydantic only.

One spec is one sweep. Importing this module loads no torch and no ray (the control plane validates
with it). Validation errors name the field. `canonical_json()` and `spec_hash()` identify a spec.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from functools import cached_property
from typing import Annotated, Any

from pydantic import (
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from smart_core.config import METHOD_PRESETS, method_config
from worker.contract import spec_rules as rules
from worker.contract.function import FunctionSpec, free_axis_names, free_grid, free_sampled
from worker.contract.grid import METHOD_FIELDS, TRAIN_FIELDS, expand_grid, plan_digest, with_values
from worker.contract.hints import did_you_mean
from worker.contract.lora import LoraSpec
from worker.contract.method_schema import with_method_params
from worker.contract.multitask import Multitask, MultitaskPlan
from worker.contract.names import DISPLAY_NAME, no_hidden_character
from worker.contract.presets import get_preset
from worker.contract.resources import Limits, Resources
from worker.contract.search import Axis, Search, SearchSpace, StrictModel, cannot_sweep
from worker.contract.sources import SourceError, classify
from worker.contract.tasks import TASKS
from worker.contract.training_block import Training

MAX_CELLS = 10_000  # a hard ceiling; the control plane enforces its own, lower, configurable limit
# The plan's digest (JobSpec.plan_digest) as the control plane computed it, in the sweep driver's
# environment: the driver expands the spec again, with this same code, and refuses a different plan.
PLAN_DIGEST_ENV = "SMARTUNE_PLAN_DIGEST"
# Validation context: {PLAN_OF: spec} lets a spec validated from another's document take that spec's
# plan instead of expanding the grid again, where the plan's inputs are the same (JobSpec._adopt_plan).
PLAN_OF = "plan_of"
# Trial fields that no axis sweeps (Knob.sweep is false) and the spec checks itself: the same in every
# cell, they decide nothing about the grid, so a plan whose spec differs only in them is reused.
_SAME_IN_EVERY_CELL = ("data", "model", "columns", "peft")


def _source(value: str, field: str, *, aliases: bool) -> None:
    try:
        classify(value, field, aliases=aliases)
    except SourceError as err:  # the message starts with the field; pydantic prefixes it again
        raise ValueError(str(err).removeprefix(f"{field}: ")) from None


def _nonempty_task(schema: dict[str, Any]) -> None:
    """`task` in the JSON schema: a non-empty name, or a non-empty list (the document states what
    `JobSpec._known_task` refuses, so a schema-valid spec is never refused for an empty task)."""
    for option in schema.get("anyOf", []):
        option["minLength" if option.get("type") == "string" else "minItems"] = 1


class JobSpec(StrictModel):
    """A fine-tuning sweep: task, data, model, method, search space, seeds, resources, limits."""

    # The document types `method_params` per method (worker.contract.method_schema); validation is below.
    model_config = ConfigDict(json_schema_extra=lambda schema, _cls: with_method_params(schema))

    name: Annotated[str | None, DISPLAY_NAME] = Field(
        None,
        max_length=200,
        description="shown as is, so no control or format character (newlines, bidirectional overrides, "
        "zero-width characters: Unicode Cc, Cf, Cs, Zl, Zp)",
        json_schema_extra=no_hidden_character,
    )
    task: str | list[str] = Field(
        description=f"one of {sorted(TASKS)}, or a list (each fine-tuned separately, or jointly with `multitask`)",
        json_schema_extra=_nonempty_task,  # what `_known_task` enforces, with its own messages
    )
    multitask: Multitask | None = Field(
        None, description="train the listed tasks jointly (MT-DNN-SMART): shared encoder, one head per task"
    )
    data: str | None = Field(
        None,
        description="hub dataset id, local folder/file, or an uploaded dataset (dataset:NAME, dataset:NAME@VERSION, "
        "dataset:sha256:<digest>; pinned to its digest at submission); None = $SMARTUNE_GLUE_DIR, else the hub",
    )
    columns: dict[str, str] | None = Field(
        None, description="canonical column -> file column, for custom files"
    )
    train_fraction: float = Field(
        1.0, gt=0, le=1, description="0.001 / 0.01 / 0.1 / 1 (domain-adaptation study)"
    )
    model: str = Field(
        "minilm-l6", min_length=1, description="alias (minilm-l6, tiny-random), local path or hub id"
    )
    method: str = Field("smart", description=f"one of {sorted(METHOD_PRESETS)}")
    method_params: dict[str, Any] = Field(
        default_factory=dict, description="e.g. {'lambda_s': 3, 'projection': 'renorm'}"
    )
    training: Training = Field(default_factory=Training)
    peft: LoraSpec | None = Field(
        None,
        description="LoRA adapters on a frozen model (worker.contract.lora); unset: every weight trains",
        # Absent when unset, as before the field existed: older specs keep their hash.
        exclude_if=lambda value: value is None,
    )
    function: FunctionSpec | None = Field(
        None,
        description="run this function in each trial instead of the built-in training loop "
        "(docs/custom_functions.md); its search axes may name keys of its own",
        exclude_if=lambda value: value is None,  # absent when unset: older specs keep their hash
    )
    search_space: SearchSpace = Field(default_factory=SearchSpace)
    seeds: list[Annotated[int, Field(ge=0, le=2**32 - 1)]] = Field(  # numpy's and torch's seed range
        default_factory=lambda: [1], min_length=1, max_length=100
    )
    search: Search = Field(default_factory=Search)
    resources: Resources = Field(default_factory=Resources)
    priority: int = Field(0, ge=-100, le=100)
    limits: Limits = Field(default_factory=Limits)

    @model_validator(mode="wrap")
    @classmethod
    def _client_errors(cls, data: Any, handler: ModelWrapValidatorHandler[JobSpec]) -> JobSpec:
        """Every way a document can be wrong is a validation error (a 422 over REST), never a crash: a
        string where a number goes can raise TypeError deep inside a check."""
        try:
            return handler(data)
        except (TypeError, ArithmeticError, LookupError, AttributeError) as err:
            raise ValueError(f"invalid spec: {err}") from err

    @field_validator("task")
    @classmethod
    def _known_task(cls, value: str | list[str]) -> str | list[str]:
        names = [value] if isinstance(value, str) else value
        if not names:
            raise ValueError("task list is empty")
        unknown = [n for n in names if n.lower() not in TASKS]
        if unknown:
            raise ValueError(f"unknown task {unknown[0]!r}; known: {', '.join(sorted(TASKS))}")
        return value

    @field_validator("data")
    @classmethod
    def _data_source(cls, value: str | None) -> str | None:
        if value is not None:
            _source(value, "data", aliases=False)
        return value

    @field_validator("model")
    @classmethod
    def _model_source(cls, value: str) -> str:
        _source(value, "model", aliases=True)
        return value

    @field_validator("method")
    @classmethod
    def _known_method(cls, value: str) -> str:
        if value not in METHOD_PRESETS:
            raise ValueError(f"unknown method {value!r}; known: {', '.join(sorted(METHOD_PRESETS))}")
        return value

    @field_validator("method_params")
    @classmethod
    def _known_params(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        unknown = sorted(set(value) - METHOD_FIELDS)
        if unknown:
            hint = did_you_mean(("method_params", unknown[0]))  # "; did you mean `training.epochs`?"
            raise ValueError(f"unknown method parameter(s) {', '.join(unknown)}{hint or ';'} known: "
                             f"{', '.join(sorted(METHOD_FIELDS))}")  # fmt: skip
        method = info.data.get("method")
        if method in METHOD_PRESETS:
            method_config(method, **value)  # each message names the parameter; contradictions refused
        return value

    @field_validator("search_space")
    @classmethod
    def _own_keys_for_functions(cls, value: SearchSpace, info: ValidationInfo) -> SearchSpace:
        """Axes that name no trial field are a custom function's keys: only a function job has them."""
        free = free_axis_names(value.axes, TRAIN_FIELDS | METHOD_FIELDS)
        if free and info.data.get("function") is None:  # located at `search_space.axes`, as SearchSpace's own
            error = {"type": "value_error", "loc": ("axes",), "input": sorted(value.axes),
                     "ctx": {"error": ValueError(cannot_sweep(free))}}  # fmt: skip
            raise ValidationError.from_exception_data("SearchSpace", [error])  # type: ignore[list-item]
        return value

    @model_validator(mode="after")
    def _grid_is_valid(self, info: ValidationInfo) -> JobSpec:
        cells = math.prod(len(v) for v in self.grid_axes().values()) * len(self.function_grid())
        if cells > MAX_CELLS:
            raise ValueError(f"the grid has {cells} cells (with seeds); the limit is {MAX_CELLS}")
        rules.check_workers(self)
        donor = (info.context or {}).get(PLAN_OF)
        if isinstance(donor, JobSpec):
            self._adopt_plan(donor)
        self.trials()  # every cell must make a valid training configuration
        for name, axis in self.sampled_axes().items():
            rules.check_sampled(name, axis, self.base_values())
        rules.check_optuna(self)
        rules.check_multitask(self)
        rules.check_function(self)
        return self

    @property
    def tasks(self) -> list[str]:
        return [self.task.lower()] if isinstance(self.task, str) else [t.lower() for t in self.task]

    def multitask_plan(self) -> MultitaskPlan | None:
        """What each trial trains jointly, or None (one task per trial)."""
        if self.multitask is None:
            return None
        return MultitaskPlan(tuple(self.tasks), self.multitask.sampling, self.multitask.finetune_epochs)

    def base_values(self) -> dict[str, Any]:
        """A trial's values before the grid (the method's under `method_params`, as the spec writes them):
        the preset's defaults beneath what the spec sets itself."""
        preset_defaults = get_preset(self.search_space.preset).defaults if self.search_space.preset else {}
        set_here = (
            self.training.model_fields_set | set(self.method_params) | ({"method"} & self.model_fields_set)
        )
        written = {
            # Every field, those the canonical JSON omits at their default too (Knob.omit_default).
            **{name: getattr(self.training, name) for name in type(self.training).model_fields},
            "method": self.method,
            "method_params": dict(self.method_params),
        }
        values = {k: v for k, v in preset_defaults.items() if k not in set_here}
        values |= {
            "data": self.data,
            "model": self.model,
            "train_fraction": self.train_fraction,
            "columns": self.columns,
            "peft": self.peft.model_dump() if self.peft is not None else None,
        }
        if "workers" not in set_here and self.resources.gpus > 1:
            values["workers"] = int(self.resources.gpus)  # the GPUs a trial reserves, one rank on each
        return with_values(written, values)

    def grid_axes(self) -> dict[str, list[Any]]:
        """Axes expanded into explicit cells: the preset's, the spec's grid axes, tasks and seeds."""
        axes: dict[str, list[Any]] = {}
        if self.search_space.preset:
            axes |= {k: list(v) for k, v in get_preset(self.search_space.preset).axes.items()}
        for name, axis in self._field_axes().items():
            if axis.type == "grid" or (axis.type == "choice" and self.search.algorithm == "grid"):
                axes[name] = list(axis.values or [])
            else:
                axes.pop(name, None)  # sampled by Tune instead
        # A multitask trial trains every task: its `task` field is the first, the plan carries the rest.
        axes["task"] = self.tasks[:1] if self.multitask is not None else self.tasks
        axes["seed"] = list(self.seeds)
        return axes

    def sampled_axes(self) -> dict[str, Axis]:
        """Axes of trial fields Ray Tune samples (random search): choice, uniform, loguniform."""
        return {k: a for k, a in self._field_axes().items() if k not in self.grid_axes()}

    def _field_axes(self) -> dict[str, Axis]:
        """The axes that set trial fields (not a custom function's own keys)."""
        return {k: a for k, a in self.search_space.axes.items() if k in TRAIN_FIELDS | METHOD_FIELDS}

    def function_axes(self) -> dict[str, Axis]:
        """A custom function's own axes: the names of no trial field (empty for other jobs)."""
        free = free_axis_names(self.search_space.axes, TRAIN_FIELDS | METHOD_FIELDS)
        return {name: self.search_space.axes[name] for name in free}

    def function_grid(self) -> list[dict[str, Any]]:
        """The combinations of the function's own grid axes, crossed with `trials()` by Tune ([{}]: none)."""
        return free_grid(self.function_axes(), self.search.algorithm)

    def function_sampled(self) -> dict[str, Axis]:
        """The function's own axes that Tune samples."""
        return free_sampled(self.function_axes(), self.search.algorithm)

    def trial_count(self) -> int:
        """Trials the sweep runs: deduplicated cells (seeds included) x the function's own grid x samples."""
        return len(self._plan) * len(self.function_grid()) * self.search.num_samples

    def trials(self) -> list[dict[str, Any]]:
        """The deduplicated trials of the grid, each the values of a TrainConfig (sampled axes are filled
        in by Tune); expanded and validated once per spec, a fresh copy of each on every call."""
        return [{**trial, "method_params": dict(trial["method_params"])} for trial in self._plan]

    def plan_digest(self) -> str:
        """The SHA-256 of `trials()`: what the control plane planned, checked by the driver (PLAN_DIGEST_ENV)."""
        return plan_digest(self._plan)

    # Caches live in cached properties, not private attributes: pydantic's equality compares private
    # attributes, and two equal specs must stay equal whichever of them was already expanded or hashed.
    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> JobSpec:
        """A copy with `update` applied; the caches are dropped, since they describe the old values, except
        a plan that the update leaves as it is (`_adopt_plan`)."""
        copy = super().model_copy(update=update, deep=deep)
        for cache in ("_plan", "_canonical"):
            copy.__dict__.pop(cache, None)
        copy._adopt_plan(self)
        return copy

    def _adopt_plan(self, donor: JobSpec) -> None:
        """Take `donor`'s expanded plan when it is this spec's too: the same axes and base values, but for
        fields that are the same in every cell (the data a dataset reference pins, say), set anew."""
        plan = donor.__dict__.get("_plan")
        if plan is None or "_plan" in self.__dict__ or self.grid_axes() != donor.grid_axes():
            return
        mine = self.base_values()
        same = {k: mine[k] for k in _SAME_IN_EVERY_CELL}
        if {**donor.base_values(), **same} == mine:
            self.__dict__["_plan"] = [{**trial, **same} for trial in plan]

    @cached_property
    def _plan(self) -> list[dict[str, Any]]:
        return expand_grid(self.base_values(), self.grid_axes())[0]

    def canonical_json(self) -> str:
        """The spec as sorted, compact JSON: what travels to the driver and what `spec_hash` hashes."""
        return self._canonical

    @cached_property
    def _canonical(self) -> str:
        return json.dumps(self._resolved_document(), sort_keys=True, separators=(",", ":"))

    def _resolved_document(self) -> dict[str, Any]:
        """The spec as JSON data with its preset's training defaults written out: parsed again, it means
        the same trials. A plain dump carries every training default as if set here, and those would then
        hide the preset's (the paper grid's 6 epochs of Adam would become 3 of AdamW at the driver). The
        preset's method fields need nothing: `method_params` holds only what the spec set, so a new parse
        applies the preset to the rest again."""
        document = self.model_dump(mode="json")
        if document["multitask"] is None:  # absent, as before the block existed: older specs keep their hash
            del document["multitask"]
        if document["limits"]["stall_timeout_s"] is None:  # likewise for this later limit
            del document["limits"]["stall_timeout_s"]
        values = self.base_values()
        preset = get_preset(self.search_space.preset).defaults if self.search_space.preset else {}
        for name in preset.keys() & set(document["training"]):
            document["training"][name] = values[name]
        if "method" in preset:
            document["method"] = values["method"]
        return document

    def spec_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()
