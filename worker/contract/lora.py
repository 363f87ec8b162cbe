"""The job spec's `peft` block: train low-rank adapters (LoRA, Hu et al. 2021) instead of every weight.

`peft: {method: lora, r: 8, alpha: 16, dropout: 0.05, target_modules: [q_proj, v_proj]}` wraps the trial's
model with the `peft` library's LoRA for sequence classification (worker.training.lora): the base weights
are frozen, each targeted linear layer gains a rank-`r` update scaled by `alpha / r`, and the task head
stays fully trainable. SMART's momentum teacher then tracks the trainable parameters only (the adapters and
the head), so its memory is the adapter's, not a second copy of the model. Pydantic only (the control plane
validates with it; the memory estimate reads it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

# A module name or suffix as peft matches it (`q_proj`, `attn.c_attn`): identifiers joined by dots.
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")


class LoraSpec(BaseModel):
    """LoRA adapters (the `peft` library) on a frozen model: each targeted linear layer gains a trainable
    rank-`r` update scaled by `alpha / r`, the task head trains whole, every other weight stays frozen;
    SMART's momentum teacher then holds the adapters and the head only. `alpha` is peft's `lora_alpha`,
    `dropout` its `lora_dropout`. Not with `multitask`."""

    # Strict as the spec's other blocks (worker.contract.search.StrictModel, which this module cannot
    # import: the trial's fields, which search reads, read this).
    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Literal["lora"] = Field("lora", description="the adapter method (only LoRA, for now)")
    r: int = Field(8, ge=1, le=1024, description="the rank of each low-rank update")
    alpha: int = Field(16, ge=1, le=65536, description="scaling: the update is multiplied by alpha / r")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the adapters' input")
    target_modules: list[str] | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="names (or dotted suffixes) of the linear layers that get adapters, e.g. [q_proj, "
        "v_proj]; unset: peft's default for the architecture (query/value projections: BERT `query, value`, "
        "GPT-2 `c_attn`, Llama and Qwen2 `q_proj, v_proj`)",
    )

    @field_validator("target_modules")
    @classmethod
    def _module_names(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        for name in value:
            if not _MODULE_NAME.match(name):
                raise ValueError(f"{name!r} is not a module name (identifiers joined by dots, e.g. q_proj)")
        if len(set(value)) != len(value):
            raise ValueError(f"a module is named twice: {value}")
        return value

    def scaling(self) -> float:
        """alpha / r: what multiplies the low-rank update B·A (peft's `scaling`)."""
        return self.alpha / self.r


def lora_spec(values: Mapping[str, Any] | None) -> LoraSpec | None:
    """A trial's `peft` value (plain data, as TrainConfig carries it) as a LoraSpec, or None; ValueError
    naming the field otherwise."""
    if values is None:
        return None
    try:
        return LoraSpec.model_validate(values)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ValueError(f"invalid value for peft{'.' + where if where else ''}: {first['msg']}") from None
