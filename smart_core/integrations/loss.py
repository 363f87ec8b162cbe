"""SMART's loss for batches of a Hugging Face sequence-classification model, for loops that are not ours.

The loss is the project's `Objective` (task loss + λ_s·R_s + μ·D_Breg, or a baseline's) on the model split at
its embedding-layer output by the project's `EmbeddingAdapter`, built as worker.training builds it: the same
defaults, dropout modes, precision plan and momentum teacher. The loop owns everything else (the backward,
clipping, the optimiser) and calls `after_update()` once after each optimiser step, never per micro-batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from smart_core.config import MethodConfig
from smart_core.integrations.embedding import EmbeddingAdapter
from smart_core.objective import ModelFns, Objective

if TYPE_CHECKING:  # annotations only (see smart_core.integrations.embedding)
    from transformers import PreTrainedModel


class SmartLoss:
    """`loss, parts = smart(batch)` for a batch dict (input_ids, attention_mask, [token_type_ids], labels).

    `planned_updates`: the optimiser steps the run will take (the teacher's β switches after
    `beta_switch` of them). `regression` defaults to the model's head: one output is regression.
    `generator`: where R_s's noise is drawn from (None: torch's global generator, as the project's loop).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        method: MethodConfig,
        *,
        planned_updates: int,
        regression: bool | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        if regression is None:
            regression = model.config.num_labels == 1
        self.model = model
        self.adapter = EmbeddingAdapter(model, regression, site=method.perturb_site)
        self.objective = Objective(
            method,
            regression=regression,
            module=model,
            planned_updates=planned_updates,
            diagnostic_params=self.adapter.head_parameters(),
            generator=generator,
        )

    def __call__(self, batch: Mapping[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """(the loss with graph, its detached components: task_loss, r_s, d_breg, ...) for `batch`."""
        if "labels" not in batch:
            raise ValueError("SMART's loss needs the batch's `labels`")
        inputs = {key: value for key, value in batch.items() if key != "labels"}
        fns = ModelFns(
            embed=lambda: self.adapter.embed(inputs),
            forward=lambda embeddings: self.adapter.forward_from_embeddings(inputs, embeddings),
            mask=inputs["attention_mask"],
        )
        return self.objective(fns, batch["labels"])

    def after_update(self) -> None:
        """After each optimiser step (taken or skipped, as the project's loop): the teacher's schedule."""
        self.objective.after_update()

    def state_dict(self) -> dict[str, Any]:
        """The teacher θ̃ and the step count, for a checkpoint beside the model's and optimiser's."""
        reference = self.objective.reference
        return {
            "steps": self.objective.steps,
            "reference": reference.state_dict() if reference is not None else None,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores `state_dict()`'s teacher and step count; a checkpoint of a method with a teacher and a
        method without one (or the reverse) do not mix: refused, not half-restored."""
        reference, saved = self.objective.reference, state["reference"]
        if (reference is None) != (saved is None):
            raise ValueError(
                f"the checkpoint {'has no' if saved is None else 'has a'} teacher θ̃ and this method "
                f"(mu = {self.objective.config.mu}) {'has none' if reference is None else 'has one'}: "
                "resume with the method the checkpoint was saved with"
            )
        self.objective.steps = int(state["steps"])
        if reference is not None:
            reference.load_state_dict(dict(saved))
